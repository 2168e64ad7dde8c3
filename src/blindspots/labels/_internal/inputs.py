"""Input sources for the label-issue engine and their validation.

Three kinds of input give the same batches of (labels int [b, H, W], pred_probs float [b, K, H, W]):
in-memory or memory-mapped arrays (also `.npy` paths, read in chunks with plain file reads so that
resident memory does not grow with N), an iterable of batches, or a `Segmenter` plus a dataset of
(image, mask) pairs whose probabilities are computed on the fly and never stored whole.
"""
from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from blindspots.batches import size_batches
from blindspots._validation import check_int
from blindspots.models.protocol import predict_segmenter, reads_ids

if TYPE_CHECKING:  # torch is heavy; the label engine itself needs only numpy
    from blindspots.models.adapters import Segmenter


#: default number of probability values per chunk (~8 MB of float32)
DEFAULT_CHUNK_VALUES = 1 << 21
#: tolerance for probabilities summing to 1 over the class axis
PROB_ATOL = 1e-3


class LabelledSet(Protocol):
    """What the model path needs from a dataset (e.g. `blindspots.data.segsets.SegmentationSet`)."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]: ...


class BadLabelError(ValueError):
    """A label that is neither a class id 0..K-1 nor ignore_index (a ValueError).

    image: the image's position in the input; pixel: (row, column); value: the label; num_classes: K.
    """

    def __init__(self, message: str, *, image: int, pixel: tuple[int, int], value: int, num_classes: int) -> None:
        super().__init__(message)
        self.image, self.pixel, self.value, self.num_classes = image, pixel, value, num_classes


def bad_label_advice(value: int, num_classes: int, ignore_index: int | None) -> str:
    """What to do about a label outside the model's classes (the end of the error message)."""
    ign = "" if ignore_index is None else f" or to ignore_index {ignore_index}"
    if value >= num_classes:
        return (f"the masks use class {value} but the model predicts only {num_classes} classes "
                f"(0..{num_classes - 1}): "
                f"map that class to one the model has{ign} in the masks (e.g. a classes file or label map), "
                "or use a model with more classes" + ("" if ignore_index is not None else
                                                      "; or set ignore_index if it marks unlabelled pixels"))
    return f"a negative label: map it to a class id 0..{num_classes - 1}{ign}"


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """An int >= minimum, else ValueError naming `name` (the shared check, `_validation.check_int`)."""
    return check_int(value, name, minimum=minimum)


def check_shapes(labels_shape: tuple[int, ...], probs_shape: tuple[int, ...], labels_dtype: np.dtype,
                 probs_dtype: np.dtype, downsample: int = 1) -> None:
    """Shape and dtype checks that need no data: labels int [N,H,W], pred_probs float [N,K,H,W]."""
    if len(labels_shape) != 3:
        raise ValueError(f"labels: expected shape (N, H, W), got {labels_shape}")
    if len(probs_shape) != 4:
        raise ValueError(f"pred_probs: expected shape (N, K, H, W), got {probs_shape}")
    if np.dtype(labels_dtype).kind not in "iu":
        raise ValueError(f"labels: expected an integer dtype, got {np.dtype(labels_dtype)}")
    if np.dtype(probs_dtype).kind != "f":
        raise ValueError(f"pred_probs: expected a floating dtype (float16/32/64), got {np.dtype(probs_dtype)}")
    n, h, w = labels_shape
    n2, k, h2, w2 = probs_shape
    if (n, h, w) != (n2, h2, w2):
        raise ValueError(
            f"pred_probs: expected shape (N, K, H, W) = ({n}, K, {h}, {w}) to match labels {labels_shape}, "
            f"got {probs_shape}")
    if k < 2:  # with one class every label agrees with the model: every image would score 1.0
        raise ValueError(f"pred_probs: expected at least two classes (K >= 2; a binary model gives [1 - p, p]), "
                         f"got K = {k}")
    if n == 0:
        raise ValueError(f"labels: expected at least one image, got N = 0 (shape {labels_shape})")
    if h == 0 or w == 0:
        raise ValueError(f"labels: expected non-empty images, got H = {h}, W = {w}")
    if h % downsample or w % downsample:
        raise ValueError(f"downsample: expected a factor dividing H = {h} and W = {w}, got {downsample}")


def check_values(labels: np.ndarray, pred_probs: np.ndarray, ignore_index: int | None, start: int,
                 atol: float = PROB_ATOL) -> str | None:
    """Value checks on one chunk (images start..start+b), in numpy (the compiled pass in
    `pixels.scan_chunk` does the same in one read): see `report_values`."""
    k = pred_probs.shape[1]
    # float32 accumulation is far below atol and half the cost of float64
    sums = pred_probs.sum(axis=1, dtype=np.promote_types(pred_probs.dtype, np.float32))
    bad_lab = (labels < 0) | (labels >= k)
    if ignore_index is not None:
        bad_lab &= labels != ignore_index
    low = pred_probs.min(axis=1)

    def first(mask: np.ndarray) -> int:
        flat = np.flatnonzero(mask)
        return int(flat[0]) if flat.size else -1

    finite = np.isfinite(sums)
    first_off = first(finite & (np.abs(sums - 1.0) > atol))
    return report_values((first(bad_lab), first(~finite), first(low < -atol), first_off),
                         labels, pred_probs, ignore_index, start, atol)


def report_values(first: Sequence[int], labels: np.ndarray, pred_probs: np.ndarray, ignore_index: int | None,
                  start: int, atol: float) -> str | None:
    """Raise for invalid values, else describe where probabilities do not sum to 1 (None: they all do).

    first: flat pixel positions in the chunk (-1: none) of the first label that is neither a class id
    nor ignore_index, the first non-finite class sum (NaN or inf anywhere in that pixel), the first
    value below -atol, and the first class sum off 1 by more than atol. Unnormalised rows are valid
    (cleanlab computes on them as given): the caller warns once per call.
    """
    bad_label, non_finite, negative, unnormalised = (int(v) for v in first)
    k = pred_probs.shape[1]

    def where(flat: int) -> tuple[int, int, int]:
        i, y, x = np.unravel_index(flat, labels.shape)
        return int(i), int(y), int(x)

    def class_sum(i: int, y: int, x: int) -> float:
        return float(np.asarray(pred_probs[i, :, y, x], dtype=np.float64).sum())

    if non_finite >= 0:
        i, y, x = where(non_finite)
        raise ValueError(f"pred_probs: expected finite probabilities, got a class sum of {class_sum(i, y, x)!r} at "
                         f"image {start + i}, pixel ({y}, {x})")
    if negative >= 0:
        i, y, x = where(negative)
        lo = float(np.min(pred_probs[i, :, y, x]))
        raise ValueError(f"pred_probs: expected values >= 0 (probabilities), got {lo!r} at image {start + i}, "
                         f"pixel ({y}, {x}); apply a softmax to logits first")
    if bad_label >= 0:
        i, y, x = where(bad_label)
        allowed = f"0..{k - 1}" + ("" if ignore_index is None else f" or ignore_index {ignore_index}")
        value = int(labels[i, y, x])
        raise BadLabelError(f"labels: expected class ids in {allowed}, got {value} at image {start + i}, "
                            f"pixel ({y}, {x}); {bad_label_advice(value, k, ignore_index)}",
                            image=start + i, pixel=(y, x), value=value, num_classes=k)
    if unnormalised >= 0:
        i, y, x = where(unnormalised)
        return f"sum {class_sum(i, y, x):.6g} at image {start + i}, pixel ({y}, {x})"
    return None


def warn_unnormalised(note: str, atol: float) -> None:
    """The one warning of a call whose pred_probs do not sum to 1, pointed at the caller's line."""
    warnings.warn(f"pred_probs: probabilities do not sum to 1 over the class axis within {atol} ({note}); "
                  "computing on the values as given, as cleanlab does (apply a softmax to logits for "
                  "calibrated results)", UserWarning, stacklevel=_outside_stacklevel())


def _outside_stacklevel() -> int:
    """stacklevel of the first frame outside blindspots.labels (the user's call)."""
    here = str(Path(__file__).resolve().parents[1])
    level, f = 1, sys._getframe(1)
    while f is not None and str(Path(f.f_code.co_filename).resolve()).startswith(here):
        f = f.f_back
        level += 1
    return level


def chunk_images(k: int, h: int, w: int, batch_size: int | None) -> int:
    """Images per chunk: `batch_size` counts probability values as in cleanlab (K*H*W per image)."""
    values = DEFAULT_CHUNK_VALUES if batch_size is None else batch_size
    return max(values // max(k * h * w, 1), 1)


class _NpyReader:
    """Chunked reads of a C-ordered `.npy` file with plain file reads (no mapping: RSS stays flat)."""

    def __init__(self, path: str | os.PathLike, offset: int | None = None,
                 shape: tuple[int, ...] | None = None, dtype: np.dtype | None = None) -> None:
        self.path = Path(path)
        if offset is None:
            # map only to read the header (no page is touched), then read chunks with plain reads
            m = np.load(self.path, mmap_mode="r")
            if not isinstance(m, np.memmap) or not m.flags.c_contiguous:
                raise ValueError(f"{self.path}: expected a C-ordered .npy array")
            offset, shape, dtype = m.offset, m.shape, m.dtype
            del m
        self.offset, self.shape, self.dtype = int(offset), tuple(shape), np.dtype(dtype)
        self.ndim = len(self.shape)
        self.row = int(np.prod(self.shape[1:], dtype=np.int64)) if self.ndim > 1 else 1

    def __len__(self) -> int:
        return self.shape[0]

    def read(self, start: int, stop: int) -> np.ndarray:
        count = (stop - start) * self.row
        with open(self.path, "rb") as f:
            f.seek(self.offset + start * self.row * self.dtype.itemsize)
            out = np.fromfile(f, dtype=self.dtype, count=count)
        return out.reshape((stop - start,) + self.shape[1:])


def as_readable(x: Any, name: str) -> Any:
    """np.ndarray | np.memmap | .npy path -> something with .shape, .dtype and chunk reads."""
    if isinstance(x, (str, os.PathLike)):
        p = Path(x)
        if not p.is_file():
            raise ValueError(f"{name}: expected an array or the path of an existing .npy file, got {str(x)!r}")
        return _NpyReader(p)
    if isinstance(x, np.memmap) and x.filename is not None and x.flags.c_contiguous and x.base is not None \
            and x.offset is not None and x.ndim >= 1 and _memmap_is_whole(x):
        return _NpyReader(x.filename, x.offset, x.shape, x.dtype)
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "__getitem__"):
        return x  # array-likes such as zarr/h5py datasets: sliced per chunk
    try:
        return np.asarray(x)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"{name}: expected an array-like, got {type(x).__name__}") from e


def _memmap_is_whole(x: np.memmap) -> bool:
    """True when `x` maps a contiguous run of its file starting at x.offset (e.g. from np.load)."""
    try:
        size = os.path.getsize(x.filename)
    except OSError:
        return False
    return x.offset + x.nbytes <= size


def read_rows(x: Any, start: int, stop: int) -> np.ndarray:
    if isinstance(x, _NpyReader):
        return x.read(start, stop)
    return np.asarray(x[start:stop])


class ArrayBatches:
    """Re-iterable chunks of in-memory / memory-mapped / `.npy` arrays.

    labels: int [N, H, W]; pred_probs: float [N, K, H, W] (or .npy paths of such arrays).
    """

    reiterable = True

    def __init__(self, labels: Any, pred_probs: Any, *, downsample: int = 1) -> None:
        self.labels = as_readable(labels, "labels")
        self.pred_probs = as_readable(pred_probs, "pred_probs")
        check_shapes(tuple(self.labels.shape), tuple(self.pred_probs.shape), self.labels.dtype,
                     self.pred_probs.dtype, downsample)
        self.n, self.num_classes, self.h, self.w = (int(s) for s in self.pred_probs.shape)
        self.dtype = np.dtype(self.pred_probs.dtype)

    def __len__(self) -> int:
        return self.n

    def iter(self, images_per_chunk: int, start: int = 0) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        for s in range(start, self.n, images_per_chunk):
            e = min(s + images_per_chunk, self.n)
            yield s, read_rows(self.labels, s, e), read_rows(self.pred_probs, s, e)


class IterableBatches:
    """A one-shot iterable of (labels int [b,H,W], pred_probs float [b,K,H,W]) batches.

    K must agree across batches; H and W may differ from batch to batch (images of mixed sizes: one
    batch per size, or one image per batch). N is known once the iterable is exhausted.
    `h`, `w` are the first batch's size.
    """

    reiterable = False

    def __init__(self, batches: Iterable[tuple[Any, Any]], *, n: int | None = None, downsample: int = 1) -> None:
        if isinstance(batches, (np.ndarray, str, bytes)) or not isinstance(batches, Iterable):
            raise ValueError(f"pred_probs: expected arrays, or labels=an iterable of (labels, pred_probs) batches, "
                             f"got {type(batches).__name__}")
        self.batches = batches
        self.n = n
        self.downsample = downsample
        self.num_classes: int | None = None
        self.h: int | None = None
        self.w: int | None = None
        self.dtype: np.dtype | None = None

    def __len__(self) -> int:
        if self.n is None:
            raise TypeError("length unknown until the batches are consumed")
        return self.n

    def iter(self, images_per_chunk: int | None = None, start: int = 0) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        pos = 0
        for item in self.batches:
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                raise ValueError(f"labels: expected each batch to be a (labels, pred_probs) pair, got "
                                 f"{type(item).__name__}")
            lab, pp = np.asarray(item[0]), np.asarray(item[1])
            if lab.ndim == 2 and pp.ndim == 3:  # a single image is a batch of one
                lab, pp = lab[None], pp[None]
            try:
                check_shapes(lab.shape, pp.shape, lab.dtype, pp.dtype, self.downsample)
            except ValueError as e:  # images of mixed sizes: say which one
                hint = "; use a downsample that divides every image's size (1 always does)" \
                    if str(e).startswith("downsample") else ""
                raise ValueError(f"{e} at image {start + pos}{hint}") from None
            if self.num_classes is None:
                self.num_classes, self.h, self.w, self.dtype = pp.shape[1], pp.shape[2], pp.shape[3], pp.dtype
            elif pp.shape[1] != self.num_classes:
                raise ValueError(f"pred_probs: expected every batch to have {self.num_classes} classes (b, "
                                 f"{self.num_classes}, H, W), got {pp.shape} at image {pos}")
            if pp.dtype != self.dtype:
                pp = pp.astype(self.dtype)
            if lab.shape[0] == 0:
                continue
            yield start + pos, lab, pp
            pos += lab.shape[0]
        self.n = pos


def predict_images(model: Any, images: list[np.ndarray], ids: Sequence[str] | None) -> np.ndarray:
    """One forward pass: images of one size uint8 [b, H, W, 3] -> probabilities [b, K, H, W].

    A model keyed by id (`reads_ids`, e.g. a folder of `<id>.npy`) is read by the images' ids,
    checked against their sizes; it needs a dataset with `.ids`.
    """
    if reads_ids(model) and ids is None:
        raise ValueError(f"model: a precomputed model ({type(model).__name__}) is read by image id; expected "
                         "a dataset with .ids (e.g. blindspots.data.open_segset), got one without")
    return np.asarray(predict_segmenter(model, np.stack(images), ids))


class ModelBatches(IterableBatches):
    """Probabilities computed on the fly by a `Segmenter` over a dataset of (image, mask) pairs.

    model.predict_proba(uint8 [b, H, W, 3]) -> float32 [b, K, H, W]; dataset[i] -> (image uint8 [H, W, 3],
    mask int [H, W]). Images may differ in size: each window of `batch_size` images is predicted one size
    at a time. Nothing of size N is kept; `start` resumes at an image index.
    """

    def __init__(self, model: Segmenter, dataset: LabelledSet | Sequence[tuple[np.ndarray, np.ndarray]], *,
                 batch_size: int = 8, downsample: int = 1) -> None:
        if not hasattr(model, "predict_proba"):
            hint = (" (wrap a function f(uint8 [N, H, W, 3]) -> [N, K, H, W] with blindspots.models.adapters."
                    "callable.CallableSegmenter(f), or load a model spec with blindspots.models.load.load_model)"
                    if callable(model) else "")
            raise ValueError(f"model: expected a Segmenter with predict_proba{hint}, got {type(model).__name__}")
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ValueError(f"dataset: expected an indexable dataset of (image, mask) pairs, "
                             f"got {type(dataset).__name__}")
        self.model, self.dataset = model, dataset
        self.model_batch = check_positive_int(batch_size, "batch_size")
        super().__init__([], n=len(dataset), downsample=downsample)

    def _predict(self, images: list[np.ndarray], masks: list[np.ndarray], index: list[int]) -> np.ndarray:
        """Images of one size uint8 [b, H, W, 3] (dataset positions `index`) -> probabilities float
        [b, K, H, W] at the masks' size."""
        ds_ids = getattr(self.dataset, "ids", None)
        h, w = images[0].shape[:2]
        if any(m.shape != (h, w) for m in masks):
            j = next(j for j, m in enumerate(masks) if m.shape != (h, w))
            name = f"image {index[j]}" + ("" if ds_ids is None else f" ({ds_ids[index[j]]!r})")
            raise ValueError(f"dataset: expected each mask at its image's size ({h}, {w}), got {masks[j].shape} "
                             f"at {name}; resize the mask (nearest neighbour) or its image to match")
        probs = self._probabilities(images, None if ds_ids is None else [ds_ids[i] for i in index])
        if probs.ndim != 4 or probs.shape[0] != len(images) or probs.shape[2:] != (h, w):
            raise ValueError(f"model: expected predict_proba to return [b, K, {h}, {w}] at the mask resolution, "
                             f"got {probs.shape}")
        return probs

    def _probabilities(self, images: list[np.ndarray], ids: Sequence[str] | None) -> Any:
        """float [b, K, H, W] of one forward (a subclass may leave them on the model's device)."""
        return predict_images(self.model, images, ids)

    def _stack(self, parts: list[Any]) -> Any:
        """One batch of per-image probabilities [K, H, W] -> [b, K, H, W]."""
        return np.stack(parts)

    def _generate(self, start: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        n = len(self.dataset)
        for s in range(start, n, self.model_batch):
            items = [(np.asarray(im), np.asarray(m)) for im, m in
                     (self.dataset[i] for i in range(s, min(s + self.model_batch, n)))]
            # images of mixed sizes: forward passes per size in this window (pixel budget: memory) ...
            probs: list[np.ndarray | None] = [None] * len(items)
            for group in size_batches(range(len(items)), lambda j: items[j][0].shape, max_images=self.model_batch):
                pp = self._predict([items[j][0] for j in group], [items[j][1] for j in group],
                                   [s + j for j in group])
                for j, p in zip(group, pp):
                    probs[j] = p
            # ... and batches yielded in dataset order, one per run of equal sizes (ids stay aligned)
            j = 0
            while j < len(items):
                e = j + 1
                while e < len(items) and items[e][1].shape == items[j][1].shape:
                    e += 1
                yield np.stack([m for _, m in items[j:e]]), self._stack(probs[j:e])
                j = e

    def iter(self, images_per_chunk: int | None = None, start: int = 0) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        self.batches = self._generate(start)
        total = len(self.dataset)
        yield from super().iter(images_per_chunk, start)
        self.n = total


def as_batches(labels: Any = None, pred_probs: Any = None, *, model: Segmenter | None = None,
               dataset: Any = None, model_batch_size: int = 8, downsample: int = 1
               ) -> ArrayBatches | IterableBatches:
    """Pick the input kind from the arguments.

    - labels + pred_probs: arrays, memory-mapped arrays or `.npy` paths -> `ArrayBatches`;
    - labels = an iterable of (labels, pred_probs) batches and pred_probs None -> `IterableBatches`;
    - model + dataset (labels and pred_probs None) -> `ModelBatches`.
    """
    if model is not None or dataset is not None:
        if model is None or dataset is None:
            raise ValueError("model: expected both model and dataset (or neither), got only "
                             + ("dataset" if model is None else "model"))
        if labels is not None or pred_probs is not None:
            raise ValueError("labels: expected None when model and dataset are given (labels come from the "
                             "dataset), got an input")
        return ModelBatches(model, dataset, batch_size=model_batch_size, downsample=downsample)
    if labels is None:
        raise ValueError("labels: expected an array of shape (N, H, W), got None")
    if pred_probs is None:
        if isinstance(labels, (np.ndarray, str, os.PathLike)):
            raise ValueError("pred_probs: expected an array of shape (N, K, H, W), got None")
        if isinstance(labels, Sequence):  # a list of batches already in memory can be re-read
            return _SequenceBatches(labels, downsample=downsample)
        return IterableBatches(labels, downsample=downsample)
    return ArrayBatches(labels, pred_probs, downsample=downsample)


class _SequenceBatches(IterableBatches):
    """A list/tuple of batches already in memory: N is known up front; the same checks apply."""

    def __init__(self, batches: Sequence[tuple[Any, Any]], *, downsample: int = 1) -> None:
        super().__init__(batches, downsample=downsample)
        n = 0
        for item in batches:
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                raise ValueError(f"labels: expected each batch to be a (labels, pred_probs) pair, got "
                                 f"{type(item).__name__}")
            shape = np.shape(item[0])
            n += 1 if len(shape) == 2 else (shape[0] if shape else 0)
        self.n = n
