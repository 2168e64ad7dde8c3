"""`blindspots.batches.size_batches`: one rule for batching images of one size, bounded by pixels."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from blindspots.batches import BatchLimits, size_batches
from blindspots.data import ImagePool
from blindspots.models.protocol import predict_proba_each
from blindspots.scan.engines.pipeline import Batch, shard_messages


def _shape(item: tuple[int, tuple[int, int]]) -> tuple[int, int]:
    return item[1]


def test_pixel_budget_sizes_batches_and_a_large_image_goes_alone() -> None:
    items = [(i, (1000, 1000)) for i in range(5)] + [(9, (4000, 3000))]
    out = list(size_batches(items, _shape, max_pixels=2_500_000, max_images=16))
    assert [[i for i, _ in b] for b in out] == [[0, 1], [2, 3], [9], [4]]


def test_image_count_limit_and_every_item_once_in_one_size_per_batch() -> None:
    rng = np.random.default_rng(0)
    sizes = [(8, 8), (8, 16), (16, 16)]
    items = [(i, sizes[rng.integers(3)]) for i in range(100)]
    out = list(size_batches(items, _shape, max_images=7, max_pixels=None))
    assert sorted(i for b in out for i, _ in b) == list(range(100))
    assert all(len({s for _, s in b}) == 1 and len(b) <= 7 for b in out)
    assert out == list(size_batches(items, _shape, max_images=7, max_pixels=None))  # deterministic


def test_waiting_pixels_stay_within_the_budget_for_many_sizes() -> None:
    """50 sizes, none filling a batch: without the bound every image would wait until the end."""
    budget, waiting, peak = 30_000, [0], [0]

    def stream():
        for i in range(50):
            waiting[0] += 100 * (100 + i)
            peak[0] = max(peak[0], waiting[0])
            yield i, (100, 100 + i)

    for b in size_batches(stream(), _shape, max_images=16, max_pixels=budget):
        waiting[0] -= sum(h * w for _, (h, w) in b)
    assert peak[0] <= budget + 100 * 150
    assert waiting[0] == 0


@pytest.mark.parametrize("kw,word", [({"max_pixels": 0}, "max_pixels"), ({"max_pixels": 1.5}, "max_pixels"),
                                     ({"max_images": 0}, "max_images"), ({"max_images": True}, "max_images")])
def test_bad_limits_name_the_argument(kw: dict, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        list(size_batches([(0, (1, 1))], _shape, **kw))


def test_scan_reader_batches_by_pixels(tmp_path) -> None:
    """The scan's reader: 6 photos of 300x400 under a 250,000-pixel budget -> batches of 2."""
    for i in range(6):
        Image.fromarray(np.full((300, 400, 3), i, np.uint8)).save(tmp_path / f"p{i}.png")
    pool = ImagePool(tmp_path)
    plan = SimpleNamespace(k=0, ids=list(pool.ids), needs_images=True)
    batches = [m for m in shard_messages(pool, plan, BatchLimits(16, 250_000), None) if isinstance(m, Batch)]
    assert [len(b.ids) for b in batches] == [2, 2, 2]
    assert [b.images.shape for b in batches] == [(2, 300, 400, 3)] * 3
    # an image count alone keeps the default pixel budget (1 MP: all 6 fit in one batch)
    assert [len(b.ids) for b in shard_messages(pool, plan, 16, None) if isinstance(b, Batch)] == [6]


def test_predict_proba_each_batches_by_pixels() -> None:
    calls: list[int] = []

    class Seg:
        num_classes = 2

        def predict_proba(self, x: np.ndarray) -> np.ndarray:
            calls.append(len(x))
            return np.zeros((len(x), 2, *x.shape[1:3]), np.float32)

    images = [np.zeros((100, 100, 3), np.uint8)] * 5 + [np.zeros((50, 50, 3), np.uint8)]
    out = predict_proba_each(Seg(), images, batch_size=16, max_pixels=20_000)
    assert calls == [2, 2, 1, 1] and [p.shape for p in out] == [(2, 100, 100)] * 5 + [(2, 50, 50)]
