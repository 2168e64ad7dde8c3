"""The two model protocols every engine sees, and the array checks at their boundary.

Images enter as uint8 [N, H, W, 3] (or a sequence of equal-size uint8 [H, W, 3]).
`Segmenter.predict_proba(images, ids=None)` returns float32 [N, C, H, W] probabilities at the
input resolution, summing to 1 over C; `Classifier.predict_proba` returns float32 [N, C].
`ids` are the images' ids: a model keyed by id (precomputed outputs; `reads_ids = True`) reads
its outputs by them, pixel models ignore them. Every adapter of `blindspots.models.adapters`
takes `ids` and also carries `classes` (a `Classes`) and `info` (where the model came from).
`predict_segmenter` runs any Segmenter (a hand-written one too, whose `predict_proba` may not
take ids); `predict_proba_each` runs one on images of mixed sizes.
"""
from __future__ import annotations

from typing import Literal, Protocol, Sequence, runtime_checkable

import numpy as np

from blindspots.batches import DEFAULT_MAX_PIXELS, size_batches
from blindspots.data.classes import DEFAULT_IGNORE_INDEX, Classes

# Lazy imports: numba (its JIT kernels are compiled or loaded by their first call).

PROBA_TOLERANCE = 1e-3

OutputKind = Literal["probabilities", "logits"]
OUTPUT_KINDS = ("probabilities", "logits", "labels")


@runtime_checkable
class Segmenter(Protocol):
    """Per-pixel class probabilities. num_classes: C.

    A model keyed by image id rather than pixels (precomputed outputs) says so with a class
    attribute `reads_ids = True`: its `predict_proba` needs `ids` and uses the images only for
    their sizes. Without the attribute a Segmenter reads pixels (`reads_ids`).
    """

    num_classes: int

    def predict_proba(self, images: np.ndarray | Sequence[np.ndarray],
                      ids: Sequence[str] | None = None) -> np.ndarray:
        """uint8 [N, H, W, 3] (and the N image ids) -> float32 [N, C, H, W], summing to 1 over C."""
        ...


def reads_ids(model: object) -> bool:
    """True when `model` answers by image id, not by pixels (precomputed outputs: `reads_ids = True`)."""
    return getattr(model, "reads_ids", False) is True


def predict_segmenter(model: Segmenter, images: np.ndarray | Sequence[np.ndarray],
                      ids: Sequence[str] | None = None) -> np.ndarray:
    """float32 [N, C, H, W] of any Segmenter on uint8 [N, H, W, 3] images with ids `ids`.

    A model keyed by id gets the ids (ValueError naming `ids` when there are none or not one per
    image); a pixel model gets the images only, so a hand-written `predict_proba(images)` works too.
    """
    if not reads_ids(model):
        return model.predict_proba(images)
    if ids is None:
        raise ValueError(f"ids: expected the images' ids ({type(model).__name__} reads its outputs by image id), "
                         "got None")
    if len(ids) != len(images):
        raise ValueError(f"ids: expected one id per image ({len(images)}), got {len(ids)}")
    return model.predict_proba(images, ids=list(ids))


@runtime_checkable
class Classifier(Protocol):
    """Per-image class probabilities. num_classes: C."""

    num_classes: int

    def predict_proba(self, images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """uint8 [N, H, W, 3] (or [N, H, W] grey) -> float32 [N, C], summing to 1 over C."""
        ...


@runtime_checkable
class FeatureModel(Protocol):
    """Intermediate feature maps (for surprise adequacy): torch and ONNX adapters, callable features."""

    def features(self, images: np.ndarray | Sequence[np.ndarray], layer: str | None = None) -> np.ndarray:
        """uint8 [N, H, W, 3] -> float32 [N, D, h, w] of `layer` (a flat [N, D] layer may come as is)."""
        ...


class ModelFailure(ValueError, RuntimeError):
    """A model raised while predicting (torch, onnxruntime or user code), as one line naming the input.

    A ValueError, so the CLI prints it in one line; still a RuntimeError, so callers that caught
    torch's own errors (e.g. a shape mismatch) keep catching it.
    """


def default_classes(num_classes: int) -> Classes:
    """`class_0 .. class_{C-1}` for a model that names none (ignore value 255 when it is free)."""
    ignore = DEFAULT_IGNORE_INDEX if num_classes <= DEFAULT_IGNORE_INDEX else None
    return Classes(tuple(f"class_{k}" for k in range(num_classes)), ignore)


def model_classes(model: Segmenter | Classifier) -> Classes:
    """The class names of any model: its `classes` (every blindspots adapter has them), else class_0..

    For Segmenters written by hand in Python that carry no names; engines call this instead of
    `getattr(model, "classes", None)`.
    """
    classes = getattr(model, "classes", None)
    if isinstance(classes, Classes):
        return classes
    return default_classes(int(model.num_classes))


def as_image_batch(images: np.ndarray | Sequence[np.ndarray], name: str = "images") -> np.ndarray:
    """Validate and stack images into uint8 [N, H, W, 3] (grey [N, H, W] gets a channel axis of 1)."""
    if isinstance(images, np.ndarray):
        batch = images
    else:
        seq = list(images)
        if not seq:
            raise ValueError(f"{name}: expected at least one image, got an empty sequence")
        shapes = {np.asarray(im).shape for im in seq}
        if len(shapes) != 1:
            raise ValueError(f"{name}: expected images of one size per batch, got shapes {sorted(shapes)} "
                             "(use blindspots.models.predict_proba_each for mixed sizes)")
        batch = np.stack([np.asarray(im) for im in seq])
    if batch.dtype != np.uint8:
        raise ValueError(f"{name}: expected dtype uint8, got {batch.dtype}")
    if batch.ndim == 3 and isinstance(images, np.ndarray) and batch.shape[-1] in (3, 4):
        # one RGB(A) image, not a grey batch of images 3 or 4 pixels wide
        raise ValueError(f"{name}: expected a batch [N, H, W, 3], got one image of shape {batch.shape} "
                         f"(pass {name}[None], or a list of images)")
    if batch.ndim == 3:
        batch = batch[..., None]
    if batch.ndim != 4 or batch.shape[-1] not in (1, 3):
        raise ValueError(f"{name}: expected shape [N, H, W, 3] (or [N, H, W] grey), got {batch.shape}")
    if batch.shape[0] == 0:
        raise ValueError(f"{name}: expected at least one image, got N=0")
    if batch.shape[1] == 0 or batch.shape[2] == 0:
        raise ValueError(f"{name}: expected images of at least 1x1 pixels, got shape {batch.shape}")
    return batch


def predict_proba_each(segmenter: Segmenter, images: Sequence[np.ndarray], batch_size: int = 16,
                       max_pixels: int | None = DEFAULT_MAX_PIXELS) -> list[np.ndarray]:
    """Run `segmenter` on images of mixed sizes: one float32 [C, H_i, W_i] per image, in order.

    Images of one size are batched together (at most `batch_size` images and `max_pixels` pixels
    per call, `blindspots.batches.size_batches`).
    """
    seq = [np.asarray(im) for im in images]
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size}")
    out: list[np.ndarray | None] = [None] * len(seq)
    for part in size_batches(range(len(seq)), lambda i: seq[i].shape, max_images=int(batch_size),
                             max_pixels=max_pixels):
        proba = segmenter.predict_proba(np.stack([seq[i] for i in part]))
        for i, p in zip(part, proba):
            out[i] = p
    return out  # type: ignore[return-value]  # every slot is filled above


def short_reason(e: BaseException, limit: int = 300) -> str:
    """One line of at most `limit` characters from an exception (for one-line error messages)."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def softmax(logits: np.ndarray, axis: int = 1) -> np.ndarray:
    """Numerically stable softmax, float32."""
    z = logits.astype(np.float32, copy=True)
    z -= z.max(axis=axis, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=axis, keepdims=True)
    return z


def fmt_shape(shape: tuple[int | None, ...]) -> str:
    """(5, None, 32) -> '[5, *, 32]' for error messages."""
    return "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"


def check_shape(arr: np.ndarray, expected_shape: tuple[int | None, ...], name: str) -> None:
    """ValueError naming `name` unless `arr` has `expected_shape` (None = a free axis)."""
    if arr.ndim != len(expected_shape):
        raise ValueError(
            f"{name}: expected {len(expected_shape)} dimensions {fmt_shape(expected_shape)}, "
            f"got {arr.ndim} with shape {arr.shape}"
        )
    for axis, (want, got) in enumerate(zip(expected_shape, arr.shape)):
        if want is not None and want != got:
            raise ValueError(f"{name}: expected shape {fmt_shape(expected_shape)}, got {arr.shape} (axis {axis})")


def check_scores(arr: np.ndarray, name: str) -> None:
    """ValueError unless `arr` is floating point and finite (logits or probabilities alike)."""
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{name}: expected floating-point values, got dtype {arr.dtype}")
    # A NaN or inf anywhere makes its sum over the class axis non-finite: one read pass into an
    # array C times smaller, instead of a full-size boolean array (the scan checks every output
    # pixel of every model). Only then, or on float overflow of huge scores, the full check.
    if arr.ndim >= 2 and arr.size and np.isfinite(arr.sum(axis=1)).all():
        return
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise ValueError(f"{name}: expected finite values, got {bad} NaN/inf entries")


def check_in_unit_range(arr: np.ndarray, name: str, tolerance: float = PROBA_TOLERANCE,
                        what: str = "probabilities") -> None:
    """ValueError (suggesting output='logits') unless every value lies in [0, 1]."""
    _check_range(float(arr.min()), float(arr.max()), name, tolerance, what)


def _check_range(lo: float, hi: float, name: str, tolerance: float, what: str = "probabilities") -> None:
    """`check_in_unit_range` given the smallest and largest value."""
    if lo < -tolerance or hi > 1 + tolerance:
        raise ValueError(
            f"{name}: expected {what} in [0, 1], got values in [{lo:.4g}, {hi:.4g}]; "
            "if the model returns logits, pass output='logits' (spec option ?output=logits)"
        )


COMPILED_CHECK_MIN = 1 << 16  # values: smaller outputs keep numpy's passes (no numba import for them)


def check_probabilities(
    proba: np.ndarray,
    *,
    expected_shape: tuple[int | None, ...],
    output: OutputKind = "probabilities",
    name: str = "model output",
    tolerance: float = PROBA_TOLERANCE,
) -> np.ndarray:
    """Validate a model's output and return float32 probabilities.

    expected_shape: the required shape, None for a free axis (e.g. (N, None, H, W)).
    output: "probabilities" (must already sum to 1 over axis 1) or "logits" (softmaxed here).
    Raises ValueError naming `name`, the expected and the actual value.
    """
    arr = np.asarray(proba)
    check_shape(arr, expected_shape, name)
    if output == "logits":
        check_scores(arr, name)
        return softmax(arr, axis=1)
    if output != "probabilities":
        raise ValueError(f"output: expected 'probabilities' or 'logits', got {output!r}")
    if not np.issubdtype(arr.dtype, np.floating):
        check_scores(arr, name)  # raises: not floating point
    arr = arr.astype(np.float32, copy=False)
    if arr.size >= COMPILED_CHECK_MIN and arr.ndim >= 3 and arr.shape[1] >= 1 and arr.size > arr.shape[0] * \
            arr.shape[1] and arr.flags.c_contiguous:
        # one compiled read gives the sums, min and max (a 1.4 MP 8-class output: 5 ms against 11 ms for
        # numpy's three passes); the same numbers, so the same checks and messages. Numpy's path below
        # when a sum is not finite (its messages) or with one pixel an image (numpy sums those pairwise)
        from blindspots.models import _proba_kernels

        finite, lo, hi, worst = _proba_kernels.sums_range(arr.reshape(arr.shape[0], arr.shape[1], -1))
        if finite:
            _check_range(lo, hi, name, tolerance)
            _check_sums(worst, name, tolerance)
            return arr
    # One pass for the sums over the class axis serves both the finiteness check (check_scores) and
    # the sum check: the scan validates every output pixel, so each pass over the output counts.
    sums = arr.sum(axis=1) if arr.ndim >= 2 else arr
    if not (arr.size and np.isfinite(sums).all()):
        check_scores(arr, name)  # the full check (and its message) only when a sum is not finite
    check_in_unit_range(arr, name, tolerance)
    _check_sums(float(np.abs(sums - 1).max()) if arr.size else 0.0, name, tolerance)
    return arr


def _check_sums(worst: float, name: str, tolerance: float) -> None:
    """ValueError unless the largest |sum over the classes - 1| is within tolerance."""
    if worst > tolerance:
        raise ValueError(
            f"{name}: expected probabilities summing to 1 over the class axis (within {tolerance}), "
            f"got sums off by up to {worst:.4g}; if the model returns logits, pass output='logits' "
            "(spec option ?output=logits)"
        )


def one_hot_labels(labels: np.ndarray, num_classes: int, name: str = "labels") -> np.ndarray:
    """int [N, H, W] class ids -> float32 [N, C, H, W] one-hot probabilities."""
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{name}: expected integer class ids, got dtype {labels.dtype}")
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= num_classes:
        raise ValueError(f"{name}: expected class ids in [0, {num_classes - 1}], got values in [{lo}, {hi}]")
    out = np.zeros((labels.shape[0], num_classes) + labels.shape[1:], dtype=np.float32)
    np.put_along_axis(out, labels[:, None].astype(np.int64), 1.0, axis=1)
    return out
