"""Score how likely each image's annotation is correct (cleanlab 2.x `segmentation.rank` compatible).

pixel score = predicted probability of the given label; image score = softmin pooling of the pixel
scores, sum_i s_i * softmax((1 - s)/T)_i with temperature T = 0.1 (the paper's setting), computed in
float64 like cleanlab. Ignored pixels (ignore_index) get pixel score 1.0 and do not enter the pooling;
an image with no labelled pixel scores 1.0.
"""
from __future__ import annotations

import functools
import os
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
from tqdm.auto import tqdm

from blindspots._validation import check_ignore_index
from blindspots.labels._internal.device import DeviceModelBatches, device_scan_chunk
from blindspots.labels._internal.inputs import (PROB_ATOL, ArrayBatches, as_batches, check_positive_int, chunk_images,
                                                warn_unnormalised)
from blindspots.labels._internal.ordered_threads import ordered_map, resolve_n_jobs
from blindspots.labels._internal.pixels import scan_chunk
from blindspots.labels.filter import LabelIssueFinder, print_evaluated
from blindspots.data.classes import DEFAULT_IGNORE_INDEX
from blindspots.scan.engines.forward import on_accelerator

if TYPE_CHECKING:  # torch is heavy; the label engine itself needs only numpy
    from blindspots.models.adapters import Segmenter

# Lazy imports: numba (its JIT kernels are compiled or loaded by their first call).

#: cleanlab.internal.constants.EPSILON: lower bound of the softmax temperature
_EPSILON = 1e-6
METHODS = ("softmin", "num_pixel_issues")
#: softmin reads only the probability of each pixel's label (checked everywhere); every value of every
#: 16th image row is checked too (NaN, inf, negative, class sums), so the other K - 1 planes are read
#: for 1/16 of the rows instead of all: enough to catch logits or unnormalised maps, while a full check
#: would read K times more memory than the scores need (the call would be ~2x slower)
CHECK_ROW_STEP = 16


def softmin_pool(scores: np.ndarray, valid: np.ndarray | None = None, temperature: float = 0.1,
                 work: list[np.ndarray] | None = None) -> np.ndarray:
    """Softmin pooling per image, in float64 like cleanlab: sum_i s_i w_i with w = softmax((1 - s)/T).

    scores: float [b, H, W]; valid: bool [b, H, W] or None -> float64 [b].
    Rows with no valid pixel give 1.0. Uses (1 - s)/T - max = (min s - s)/T (the same shift cleanlab
    applies), one image at a time so temporaries stay at one image (`work`: scratch kept by the caller
    across chunks).
    """
    from blindspots.labels._internal.kernels import softmin

    return softmin(scores, valid, max(temperature, _EPSILON), work)


def _open_out(out: Any, shape: tuple[int, ...], dtype: np.dtype, name: str) -> np.ndarray:
    if out is None:
        return np.empty(shape, dtype=dtype)
    if isinstance(out, (str, os.PathLike)):
        return np.lib.format.open_memmap(Path(out), mode="w+", dtype=dtype, shape=shape)
    if getattr(out, "shape", None) != shape:
        raise ValueError(f"{name}: expected an array of shape {shape}, got {getattr(out, 'shape', type(out).__name__)}")
    return out


def get_label_quality_scores(labels: Any = None, pred_probs: Any = None, *, method: str = "softmin",
                             batch_size: int | None = None, n_jobs: int | None = None, verbose: bool = True,
                             temperature: float = 0.1, downsample: int = 1,
                             ignore_index: int | None = DEFAULT_IGNORE_INDEX,
                             model: Segmenter | None = None, dataset: Any = None, model_batch_size: int = 8,
                             pixel_scores_out: np.ndarray | str | os.PathLike | None = None,
                             return_pixel_scores: bool = True, atol: float = PROB_ATOL,
                             cache_dir: str | os.PathLike | None = None, **kwargs: Any
                             ) -> tuple[np.ndarray, np.ndarray | None]:
    """(image_scores float64 [N], pixel_scores [N, H, W]); lower = more likely mislabelled.

    Images of mixed sizes (an iterable of batches, or model + dataset) give pixel_scores as a list of N
    arrays [H_i, W_i]; arrays (one size by construction) behave exactly as in cleanlab.

    Drop-in for `cleanlab.segmentation.rank.get_label_quality_scores`; same inputs as
    `blindspots.labels.filter.find_label_issues` (arrays, memmaps, .npy paths, iterables of batches,
    model + dataset).
    method: "softmin" (paper default; temperature 0.1) or "num_pixel_issues" (1 - fraction of labelled
        pixels flagged by `find_label_issues` with `downsample`, default 1 as in cleanlab's code).
    pixel_scores: probability of the given label, in pred_probs' dtype (cleanlab returns float64; the
        values are identical), 1.0 at ignored pixels. For streams, pass `pixel_scores_out` (array or .npy
        path, memory-mapped) or `return_pixel_scores=False` to keep memory flat in N.
    n_jobs: threads scoring chunks ("softmin"; None: every core, as cleanlab's default; 1: none). Ignored by
        "num_pixel_issues" (one vectorised pass, as `find_label_issues`).
    verbose: progress bar (stderr); with "num_pixel_issues", also cleanlab's line on stdout (see
        `find_label_issues`).
    model + dataset with a model on a GPU ("softmin"): the probabilities stay on the GPU and only the
        pixel scores come back (`_internal.device`); the same scores as the host path's.
    pred_probs that do not sum to 1 (e.g. np.random.random arrays, as in cleanlab's examples) are used
    as given, as cleanlab does, with one warning. NaN, inf or negative values raise: "softmin" checks
    the label's probability of every pixel and every value of every 16th image row (`CHECK_ROW_STEP`;
    it reads only the label's probability elsewhere), "num_pixel_issues" every value.
    """
    if kwargs:
        raise ValueError(f"kwargs: expected only cleanlab's 'temperature'/'downsample', got {sorted(kwargs)}")
    if method not in METHODS:
        raise ValueError(f"method: expected one of {list(METHODS)}, got {method!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature: expected a number > 0, got {temperature!r}")
    check_positive_int(downsample, "downsample")
    ignore_index = check_ignore_index(ignore_index, negative=False)
    if batch_size is not None:
        check_positive_int(batch_size, "batch_size")
    if method == "num_pixel_issues":
        return _num_pixel_issues(labels, pred_probs, model=model, dataset=dataset, model_batch_size=model_batch_size,
                                 downsample=downsample, ignore_index=ignore_index, batch_size=batch_size,
                                 verbose=verbose, pixel_scores_out=pixel_scores_out,
                                 return_pixel_scores=return_pixel_scores, atol=atol, cache_dir=cache_dir)
    if downsample != 1:
        warnings.warn(f"downsample={downsample} is ignored by method 'softmin' (only 'num_pixel_issues' uses it)",
                      UserWarning, stacklevel=2)
    on_device = model is not None and dataset is not None and on_accelerator(model)
    if on_device:  # a model on a GPU: the probabilities stay there, one pixel score each comes back
        as_batches(labels, pred_probs, model=model, dataset=dataset)  # the same argument checks
        src: Any = DeviceModelBatches(model, dataset, batch_size=model_batch_size)
        scan_fn: Any = device_scan_chunk
    else:
        src = as_batches(labels, pred_probs, model=model, dataset=dataset, model_batch_size=model_batch_size)
        scan_fn = functools.partial(scan_chunk, need_pred=False, check=True, row_step=CHECK_ROW_STEP)
    image_scores: list[np.ndarray] = []
    parts: list[np.ndarray] = []  # only for iterables of unknown length without pixel_scores_out
    pix: np.ndarray | None = None
    chunk = chunk_images(src.num_classes, src.h, src.w, batch_size) if isinstance(src, ArrayBatches) else None
    described = threading.Event()  # once a chunk has said where rows are off 1, the others need not
    scratch = threading.local()  # each thread's softmin scratch row, kept across chunks

    def chunks() -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]:
        """(start, labels, pred_probs, pix when the scores go straight into it, else None)."""
        nonlocal pix
        for start, lab, pp in src.iter(chunk):
            dtype = src.dtype if on_device else pp.dtype  # a device tensor's: float32
            if return_pixel_scores and pix is None and src.n is not None and not parts:
                pix = _open_out(pixel_scores_out, (src.n,) + lab.shape[1:], dtype, "pixel_scores_out")
            # write the pixel scores straight into the output when it is a plain array of the same layout
            direct = (pix is not None and type(pix) is np.ndarray and lab.shape[1:] == pix.shape[1:]
                      and pix.dtype == dtype and pix.flags.c_contiguous)
            yield start, lab, pp, (pix if direct else None)

    def score(job: tuple[int, np.ndarray, np.ndarray, np.ndarray | None]
              ) -> tuple[int, str | None, np.ndarray, np.ndarray, np.ndarray | None]:
        """One chunk on a worker thread: (start, note, pixel scores [b, H, W], image scores [b], target)."""
        start, lab, pp, target = job
        r = scan_fn(lab, pp, ignore_index, start=start, atol=atol,
                    score=None if target is None else target[start:start + len(lab)], describe=not described.is_set())
        if r.note is not None:
            described.set()
        if not hasattr(scratch, "work"):
            scratch.work = []
        valid = None if ignore_index is None else r.valid
        return start, r.note, r.score, softmin_pool(r.score, valid, temperature, scratch.work), target

    warned = False
    with tqdm(total=src.n, desc="images processed using softmin", unit="img", disable=not verbose,
              leave=False) as bar:
        for start, note, s, img_scores, target in ordered_map(score, chunks(), resolve_n_jobs(n_jobs)):
            if note is not None and not warned:
                warn_unnormalised(note, atol)
                warned = True
            image_scores.append(img_scores)
            # written in place unless pix was replaced after this chunk was handed out (mixed sizes)
            if return_pixel_scores and not (target is not None and target is pix):
                if pix is not None and s.shape[1:] != pix.shape[1:]:  # images of mixed sizes
                    if pixel_scores_out is not None:
                        raise ValueError(f"pixel_scores_out: expected images of one size {pix.shape[1:]}, got "
                                         f"{s.shape[1:]} at image {start}; pass return_pixel_scores=False")
                    parts, pix = [pix[:start]], None
                if pix is not None:
                    pix[start:start + len(s)] = s
                elif pixel_scores_out is not None:
                    raise ValueError("pixel_scores_out: expected None for an iterable of unknown length, "
                                     "got an output; pass return_pixel_scores=False or a list of batches")
                else:
                    parts.append(s)
            bar.update(len(s))
    if not image_scores:
        raise ValueError("labels: expected at least one image, got none")
    scores = np.concatenate(image_scores)
    if return_pixel_scores and pix is None:
        pix = _join(parts)
    if isinstance(pix, np.memmap):
        pix.flush()
    return scores, (pix if return_pixel_scores else None)


def _join(parts: list[np.ndarray]) -> np.ndarray | list[np.ndarray]:
    """Chunks [b, H, W] -> one [N, H, W] array, or a list of N [H_i, W_i] arrays when sizes differ."""
    if len({p.shape[1:] for p in parts}) <= 1:
        return np.concatenate(parts)
    return [img for p in parts for img in p]


def _num_pixel_issues(labels: Any, pred_probs: Any, *, model: Segmenter | None, dataset: Any,
                      model_batch_size: int, downsample: int, ignore_index: int | None, batch_size: int | None,
                      verbose: bool, pixel_scores_out: Any, return_pixel_scores: bool, atol: float,
                      cache_dir: Any) -> tuple[np.ndarray, np.ndarray | None]:
    finder = LabelIssueFinder(downsample=downsample, ignore_index=ignore_index, batch_size=batch_size,
                              verbose=verbose, cache_dir=cache_dir, atol=atol)
    with finder:
        finder.fit(labels, pred_probs, model=model, dataset=dataset, model_batch_size=model_batch_size)
        if verbose:  # cleanlab's method calls its find_label_issues, which prints this line
            print_evaluated(finder)
        n = finder.n_images_
        mixed = finder.shape_ is None
        if mixed and pixel_scores_out is not None:
            raise ValueError("pixel_scores_out: expected None for images of different sizes (pixel scores are "
                             "returned as a list of [H_i, W_i] arrays), got an output")
        scores = np.empty(n, dtype=np.float64)
        pix: Any = [] if mixed and return_pixel_scores else None
        for start, mask, full in finder.iter_batches():
            b = len(mask)
            n_valid = full.valid.reshape(b, -1).sum(axis=1)
            n_issue = mask.reshape(b, -1).sum(axis=1)
            frac = np.divide(n_issue, n_valid, out=np.zeros(b), where=n_valid > 0)
            scores[start:start + b] = 1.0 - frac
            if return_pixel_scores and mixed:
                pix += [img.copy() for img in full.score]
            elif return_pixel_scores:
                if pix is None:
                    pix = _open_out(pixel_scores_out, (n,) + finder.shape_, full.score.dtype, "pixel_scores_out")
                pix[start:start + b] = full.score
    return scores, pix


def issues_from_scores(image_scores: np.ndarray, pixel_scores: np.ndarray | None = None,
                       threshold: float = 0.1) -> np.ndarray:
    """cleanlab-compatible: bool [N, H, W] of pixel_scores < threshold, or (without pixel_scores) the
    indices int [M] of images sorted by score, cut where scores reach `threshold`.

    Note: like cleanlab 2.9 this returns one index past the cut-off (`ranking[:cutoff + 1]`), i.e. the
    lowest-scoring image at or above the threshold is included when there is one; we keep that quirk
    for drop-in compatibility.
    """
    if image_scores is None:
        raise ValueError("image_scores: expected an array of shape (N,), got None")
    if threshold is None or isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating)) \
            or not 0 <= threshold <= 1:
        raise ValueError(f"threshold: expected a number in [0, 1], got {threshold!r}")
    if pixel_scores is not None:
        return np.asarray(pixel_scores) < threshold
    image_scores = np.asarray(image_scores)
    if image_scores.ndim != 1:
        raise ValueError(f"image_scores: expected shape (N,), got {image_scores.shape}")
    ranking = np.argsort(image_scores, kind="stable")
    cutoff = np.searchsorted(image_scores[ranking], threshold)
    return ranking[: cutoff + 1]
