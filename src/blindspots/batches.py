"""Group images of one size into batches, sized by a pixel budget (and at most a number of images).

Why pixels, not images: what a batch costs in memory (the decoded images, the model's activations,
the probabilities it returns at each image's own size, the statistics computed from them) grows
with its pixels. Sixteen 12-megapixel photos weigh as much as three thousand 256x256 tiles; a
count that suits one pool kills a laptop on the other. Every place that batches images of mixed
sizes (the scan's reader, the surprise columns, the label-issue model input, `predict_proba_each`)
batches through `size_batches`, so they share one rule and one default.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Iterable, Iterator, Sequence, TypeVar

from blindspots._validation import check_max_pixels as _check_pixels

T = TypeVar("T")

#: Default pixel budget of one batch: 1 megapixel (e.g. 16 images of 256x256, one 1280x720 frame, a
#: 12 MP photo alone). A batch with one image is always allowed, however large the image. Measured on
#: 176 photos of 61 sizes (up to 13.4 MP) with two ONNX text detectors: peak RSS 5.8 GB without a
#: budget (16 images a batch), 3.3 GB at 4 MP, 2.7 GB at 1 MP (benchmarks/scan.py --photos).
DEFAULT_MAX_PIXELS = 1_000_000

__all__ = ["DEFAULT_MAX_PIXELS", "BatchLimits", "size_batches", "check_max_pixels"]


@dataclass(frozen=True)
class BatchLimits:
    """How big one batch may be: at most `max_images` images and `max_pixels` pixels (None: no limit)."""

    max_images: int | None = 16
    max_pixels: int | None = DEFAULT_MAX_PIXELS

    @classmethod
    def of(cls, limits: "BatchLimits | int") -> "BatchLimits":
        """`limits` itself, or an image count with the default pixel budget."""
        return limits if isinstance(limits, BatchLimits) else cls(int(limits), DEFAULT_MAX_PIXELS)


def check_max_pixels(max_pixels: int | None, name: str = "max_pixels") -> int | None:
    """`max_pixels` as an int >= 1 (or None: no pixel budget); ValueError naming `name` otherwise."""
    return _check_pixels(max_pixels, name, allow_none=True)


def _pixels(size: Sequence[int]) -> int:
    """Pixels of an image of shape (H, W, ...) or size (H, W)."""
    return max(1, int(size[0]) * int(size[1]))


def size_batches(items: Iterable[T], size_of: Callable[[T], Hashable], *, max_images: int | None = None,
                 max_pixels: int | None = DEFAULT_MAX_PIXELS) -> Iterator[list[T]]:
    """Batches (lists of `items`, each of one size) as the items stream in.

    size_of(item): the item's shape, e.g. `image.shape` (H, W, 3); items of equal shapes share
        batches, and its first two entries are the height and width that count as pixels.
    max_images: at most this many items per batch (None: no count limit).
    max_pixels: at most this many pixels per batch, and at most this many pixels waiting in
        unfinished batches of all sizes together; a single larger image forms a batch alone.
        None: no pixel budget (only `max_images`; then every size's unfinished batch waits
        until the end, as for a pool of a few sizes).

    A batch is yielded as soon as it is full (one more image would break a limit); when the
    images waiting in unfinished batches exceed `max_pixels`, the largest waiting batch is
    yielded early, so memory stays near two budgets whatever the mix of sizes. The rest is
    yielded at the end in sorted size order. The output is a function of the input order only
    (deterministic). Memory: the items of the unfinished batches.
    """
    if max_images is not None and (isinstance(max_images, bool) or not isinstance(max_images, int)
                                   or max_images < 1):
        raise ValueError(f"max_images: expected a positive integer (or None), got {max_images!r}")
    check_max_pixels(max_pixels)
    pending: dict[Hashable, list[T]] = {}
    pending_px = 0

    for item in items:
        size = size_of(item)
        px = _pixels(size)  # type: ignore[arg-type]
        group = pending.setdefault(size, [])
        group.append(item)
        pending_px += px
        limits = [x for x in (None if max_pixels is None else max_pixels // px, max_images) if x is not None]
        if limits and len(group) >= max(1, min(limits)):
            pending_px -= px * len(group)
            yield pending.pop(size)
        elif max_pixels is not None and pending_px > max_pixels:
            # many sizes at once: the largest waiting batch goes now instead of growing memory
            biggest = max(pending, key=lambda s: _pixels(s) * len(pending[s]))  # type: ignore[arg-type]
            pending_px -= _pixels(biggest) * len(pending[biggest])  # type: ignore[arg-type]
            yield pending.pop(biggest)
    for size in sorted(pending):  # type: ignore[type-var]
        yield pending[size]
