"""The scan's host pipeline: parallel decoding and map writing give the serial scan's files, bit for bit.

Compared against `decode_workers=1` (one reader thread that decodes, as the scan ran before the pool of
decode threads): the score table (exact floats, error rows, hashes),
every map file's bytes, resume after an interruption, and a failed map write that must keep its
shard off the disk.
"""
from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from blindspots.data import ImagePool
from blindspots.data.sources import open_pool
from blindspots.models.adapters import CallableSegmenter, TorchSegmenter
from blindspots.scan import maps as map_files
from blindspots.scan import read_score_table, scan_pool
from blindspots.scan.engines import decoding
from pool_sources_helpers import photos, write_folder, write_parquet

torch.set_num_threads(1)
C = 4


def tiny_net(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, C, 1))


def models() -> dict:
    return {"t": TorchSegmenter(tiny_net(0), C, batch_size=8), "g": TorchSegmenter(tiny_net(1), C, batch_size=8)}


@pytest.fixture(scope="module")
def items() -> dict[str, bytes]:
    return photos(24)  # real photo crops of three sizes, PNG and JPEG, some in a subfolder


def table(out: Path) -> pd.DataFrame:
    return read_score_table(out).set_index("id").sort_index()


def map_bytes(out: Path) -> dict[str, bytes]:
    root = out / "maps"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.png"))}


def scan(pool, out: Path, workers: int, models_: dict | None = None, **kw) -> Path:
    args = {"target": "t", "batch_size": 4, "shard_size": 8, "progress": False, "decode_workers": workers, **kw}
    return scan_pool(pool, models_ or models(), out, **args)


@pytest.mark.parametrize("kind", ["folder", "parquet"])
def test_parallel_scan_equals_the_serial_scan(tmp_path, items, kind):
    """Folder pools decode per id on the workers; Parquet's bytes are read in runs and only decoded there.
    Either way: the same table (floats exact, error rows and hashes included) and the same map bytes."""
    if kind == "folder":
        pool_of = lambda: ImagePool(write_folder(tmp_path / "pool", items) if not (tmp_path / "pool").exists()  # noqa: E731
                                    else tmp_path / "pool")
    else:
        write_parquet(tmp_path / "pq", items)
        pool_of = lambda: open_pool(tmp_path / "pq")  # noqa: E731
    serial = scan(pool_of(), tmp_path / "serial", 1)
    for workers in (2, 5):
        par = scan(pool_of(), tmp_path / f"par{workers}", workers)
        a, b = table(serial), table(par)
        assert (a["status"] == "error").sum() >= 1  # the corrupt file is an error row in both
        pd.testing.assert_frame_equal(a, b, check_exact=True)
        assert map_bytes(par) == map_bytes(serial) and len(map_bytes(par)) == 2 * (a["status"] == "ok").sum()


def test_parallel_scan_with_resize_and_one_image_per_batch(tmp_path, items):
    pool = ImagePool(write_folder(tmp_path / "pool", items))
    kw = {"resize": (24, 32), "batch_size": 1}
    pd.testing.assert_frame_equal(table(scan(pool, tmp_path / "a", 1, **kw)), table(scan(pool, tmp_path / "b", 3, **kw)),
                                  check_exact=True)


def test_interrupted_parallel_scan_resumes_to_the_serial_table(tmp_path, items):
    pool = ImagePool(write_folder(tmp_path / "pool", items))
    net = TorchSegmenter(tiny_net(0), C)
    calls = {"n": 0}

    def flaky(images: np.ndarray) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] == 4:  # Ctrl-C in the second shard
            raise KeyboardInterrupt
        return net.predict_proba(images)

    out = tmp_path / "scan"
    with pytest.raises(KeyboardInterrupt):
        scan(pool, out, 4, models_={"t": CallableSegmenter(flaky, C)})
    done = sorted(p.name for p in (out / "models" / "t").glob("*.parquet"))
    assert done == ["shard-00000.parquet"]
    for image_id in read_score_table(out, allow_partial=True)["id"]:  # a written shard has all of its maps
        assert (out / "maps" / "t" / image_id).with_suffix(".png").is_file() or image_id == "broken.jpg"
    scan(pool, out, 4, models_={"t": CallableSegmenter(net.predict_proba, C)})
    ref = scan(pool, tmp_path / "ref", 1, models_={"t": CallableSegmenter(net.predict_proba, C)})  # same floats
    pd.testing.assert_frame_equal(table(out), table(ref), check_exact=True)
    assert map_bytes(out) == map_bytes(ref)


@pytest.mark.parametrize("workers", [1, 3])  # one decode thread has a map thread too
def test_a_failed_map_write_keeps_its_shard_off_the_disk(tmp_path, items, monkeypatch, workers):
    pool = ImagePool(write_folder(tmp_path / "pool", items, corrupt=False))
    real = map_files.save_maps

    def failing(layout, model, ids, maps):
        if any("photo_01" in i for i in ids):  # a batch of the second shard
            raise OSError("disk full")
        real(layout, model, ids, maps)

    monkeypatch.setattr(map_files, "save_maps", failing)
    out = tmp_path / "scan"
    with pytest.raises(OSError, match="disk full"):
        scan(pool, out, workers)
    written = {p.name for p in (out / "models" / "t").glob("*.parquet")}
    assert "shard-00001.parquet" not in written and "shard-00000.parquet" in written


class SlowPool:
    """A duck-typed pool whose decodes take random times (out of order on threads) and count in-flight work."""

    def __init__(self, n: int, side: int = 8) -> None:
        self.ids = [f"im_{i:03d}" for i in range(n)]
        self.side, self.busy, self.peak = side, 0, 0
        self.lock = threading.Lock()
        self.rng = random.Random(0)

    def iter_items(self, ids):
        from blindspots.data.sources.base import PoolItem

        for image_id in ids:
            with self.lock:
                self.busy += 1
                self.peak = max(self.peak, self.busy)
                delay = self.rng.random() * 0.004
            time.sleep(delay)
            with self.lock:
                self.busy -= 1
            if image_id.endswith("7"):
                yield PoolItem(image_id, None, "unreadable")
            else:
                yield PoolItem(image_id, np.full((self.side, self.side, 3), int(image_id[-3:]) % 256, np.uint8), None)


@pytest.mark.parametrize("workers", [1, 2, 6])
def test_decoded_items_keep_id_order_and_errors(workers):
    from concurrent.futures import ThreadPoolExecutor

    pool = SlowPool(60)
    errors: list[tuple[str, str]] = []
    with ThreadPoolExecutor(workers) as ex:
        got = list(decoding.decoded_items(pool, pool.ids, None, errors, ex, workers, budget=None))
    assert [g[0] for g in got] == [i for i in pool.ids if not i.endswith("7")]
    assert all(int(g[1][0, 0, 0]) == int(g[0][-3:]) and g[2] == (8, 8) and g[3] is None for g in got)
    assert errors == [(i, "unreadable") for i in pool.ids if i.endswith("7")]
    assert pool.peak <= workers


def test_images_decoded_ahead_follow_the_pixel_budget():
    assert decoding.ahead(4, None, 0) == 8
    assert decoding.ahead(4, 1_000_000, 0) == 4  # nothing seen yet: one per worker
    assert decoding.ahead(4, 1_000_000, 512 * 512) == 4  # 3 fit the budget: still one per worker
    assert decoding.ahead(4, 1_000_000, 128 * 128) == 8  # small images: twice the workers
    assert decoding.ahead(4, 1_000_000, 13_000_000) == 4  # photos above the budget: one per worker


def test_decode_workers_argument(tmp_path):
    assert decoding.check_decode_workers(None) == decoding.default_decode_workers() >= 1
    assert decoding.check_decode_workers(3) == 3
    for bad in (0, -2, 1.5, True, "4"):
        with pytest.raises(ValueError, match="decode_workers: expected a positive integer.*got"):
            decoding.check_decode_workers(bad)
    pool = ImagePool(write_folder(tmp_path / "pool", photos(2), corrupt=False))
    with pytest.raises(ValueError, match="decode_workers"):
        scan(pool, tmp_path / "out", 0)
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_batch_size_auto_without_a_gpu_is_the_default_batch(tmp_path, items, caplog):
    from blindspots.scan.engines.autobatch import check_batch_size

    pool = ImagePool(write_folder(tmp_path / "pool", items))
    with caplog.at_level("INFO", logger="blindspots.scan.engines.autobatch"):
        auto = scan(pool, tmp_path / "auto", 2, batch_size="auto")
    assert "no model on a GPU, 16 images a batch" in caplog.text
    pd.testing.assert_frame_equal(table(auto), table(scan(pool, tmp_path / "16", 2, batch_size=16)), check_exact=True)
    assert check_batch_size("Auto") == "auto" and check_batch_size(3) == 3
    for bad in (0, "big", 2.5, None):
        with pytest.raises(ValueError, match="batch_size: expected a positive integer or 'auto', got"):
            check_batch_size(bad)


def test_batch_size_auto_divides_free_memory_by_the_measured_need(monkeypatch, caplog):
    """The sizing rule with torch.cuda's memory counters faked (no GPU here): peak 5400 B above the base
    for 2 images -> 2700 B an image."""
    from blindspots.scan.engines import autobatch

    class FakeGpuModel:
        device = "cuda:0"
        batch_size = 4

        def predict_proba_device(self, images):
            return torch.full((len(images), 2, 10, 5), 0.5)

    counters = {"allocated": 1000, "peak": 6400}
    for name, fn in {"synchronize": lambda d=None: None, "reset_peak_memory_stats": lambda d=None: None,
                     "memory_allocated": lambda d=None: counters["allocated"],
                     "max_memory_allocated": lambda d=None: counters["peak"],
                     "mem_get_info": lambda d=None: (270_000, 10**9)}.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    assert autobatch.bytes_per_image(FakeGpuModel(), (10, 5)) == 5400 // 2
    with caplog.at_level("INFO", logger="blindspots.scan.engines.autobatch"):
        limits = autobatch.auto_limits({"m": FakeGpuModel()}, lambda: (10, 5))
    assert limits.max_images == 270_000 // 2 // 2700 == 50 and limits.max_pixels == 50 * 10 * 5
    assert "forwards of its own batch_size=4" in caplog.text and "50 images a batch" in caplog.text
    counters["peak"] = 10**9  # a model that needs more than the free memory still gets one image
    assert autobatch.auto_limits({"m": FakeGpuModel()}, lambda: (10, 5)).max_images == 1


def test_batch_size_auto_probes_a_model_of_logits_on_a_gpu_through_its_probabilities(monkeypatch):
    """On a GPU the scan keeps the measured softmax + device statistics path for a model of logits too
    (`forward.takes_logits`), and the probe runs that path."""
    from blindspots.scan.engines import autobatch, forward

    class FakeLogitsModel:
        device, output = torch.device("cuda:0"), "logits"

        def predict_proba_device(self, images):
            return torch.zeros((len(images), 3, 4, 4))

        def predict_logits(self, images, on_device=False):
            raise AssertionError("on a GPU the scan takes this model's probabilities, not its logits")

    got = []
    for name, fn in {"synchronize": lambda d=None: None, "reset_peak_memory_stats": lambda d=None: None,
                     "memory_allocated": lambda d=None: 0, "max_memory_allocated": lambda d=None: 800}.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    monkeypatch.setattr(autobatch, "model_stats", got.append)
    assert autobatch.bytes_per_image(FakeLogitsModel(), (4, 4)) == 400
    assert len(got) == 1 and isinstance(got[0], torch.Tensor) and tuple(got[0].shape) == (2, 3, 4, 4)
    assert forward.gives_logits(FakeLogitsModel()) and not forward.takes_logits(FakeLogitsModel())


def test_batch_size_auto_keeps_a_batch_below_int_max_elements(monkeypatch):
    """torch's CUDA bilinear upsampling refuses outputs of INT_MAX elements: with memory to spare, 150 classes
    at 512x512 get 54 images a batch (54 x 150 x 512^2 < 2^31 - 1 <= 55 x ...), not the memory rule's 64."""
    from blindspots.scan.engines import autobatch

    class FakeGpuModel:
        device, num_classes, batch_size = "cuda:0", 150, 64

        def predict_proba_device(self, images):
            return np.zeros((len(images), 1), np.float32)  # a host array: no held device memory counted

    for name, fn in {"synchronize": lambda d=None: None, "reset_peak_memory_stats": lambda d=None: None,
                     "memory_allocated": lambda d=None: 0, "max_memory_allocated": lambda d=None: 2 * 2**20,
                     "mem_get_info": lambda d=None: (10**12, 10**12)}.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    monkeypatch.setattr(autobatch, "model_stats", lambda proba: None)
    limits = autobatch.auto_limits({"m": FakeGpuModel()}, lambda: (512, 512))
    assert limits.max_images == 54 and 54 * 150 * 512 * 512 < 2**31 - 1 < 55 * 150 * 512 * 512
    assert limits.max_pixels == 54 * 512 * 512


def test_debug_log_says_where_the_threads_wait(tmp_path, items, caplog):
    pool = ImagePool(write_folder(tmp_path / "pool", items))
    with caplog.at_level("DEBUG", logger="blindspots.scan.engines.local"):
        scan(pool, tmp_path / "out", 3)
    line = [r.getMessage() for r in caplog.records if "scan stages" in r.getMessage()]
    assert len(line) == 1 and line[0].startswith("scan stages (3 decode threads): ")
    for stage in ("main: waiting for batches", "main: forward", "main: queueing for the writer", "writer: statistics",
                  "writer: rows and maps", "writer: shard files after their maps", "reader: waiting for the main thread",
                  "reader: waiting for decode threads"):
        assert stage in line[0]
    seconds = [float(x.split()[-2]) for x in line[0].split(": ", 1)[1].split(", ")]
    assert all(s >= 0 for s in seconds) and sum(seconds) > 0


def test_host_statistics_split_over_threads_are_the_same_bits():
    from concurrent.futures import ThreadPoolExecutor

    from blindspots.scan.stats import model_stats, model_stats_on

    proba = torch.softmax(torch.from_numpy(np.random.default_rng(3).normal(size=(7, 5, 12, 9)).astype(np.float32)),
                          1).numpy()
    one = model_stats(proba)
    with ThreadPoolExecutor(3) as ex:
        for parts in (1, 2, 4, 9):
            got = model_stats_on(proba, ex, parts)
            for name in ("argmax", "frac", "entropy", "maxprob"):
                np.testing.assert_array_equal(getattr(got, name), getattr(one, name))
    assert model_stats_on(proba[:1], None, 4).argmax.shape == (1, 12, 9)
