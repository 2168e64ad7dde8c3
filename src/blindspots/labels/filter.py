"""Find mislabelled pixels with confident learning (cleanlab 2.x `segmentation.filter` compatible).

Algorithm (cleanlab's `find_label_issues` for segmentation, Lad & Mueller 2023):
1. per-class confident threshold t_k = mean predicted probability of class k over pixels labelled k
   (classes never labelled get 0, clipped to 2e-6 as cleanlab's `LabelInspector` does);
2. the estimated number of issues n = #pixels whose argmax a != label and p_a >= t_a - 1e-6;
3. the n pixels with the lowest self-confidence p_label are flagged, minus those whose argmax equals
   the label.
Differences to cleanlab, all documented in `find_label_issues`: pixels labelled `ignore_index` are
excluded everywhere; exact ties at the cut-off are broken by position (first pixels in N, H, W order
win; cleanlab's unstable argsort picks arbitrarily); `downsample` takes each block's majority label
(cleanlab averages class ids and rounds); thresholds are exact global means (cleanlab keeps a running
float32/float64 mean, which differs in the last bits). Memory: a few bytes per pixel in memory for
arrays, flat in N for iterables and models.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from blindspots._validation import check_ignore_index
from blindspots.labels._internal.inputs import PROB_ATOL, ArrayBatches, as_batches, check_positive_int
from blindspots.labels._internal.pixels import sortable_key, upsample_mask
from blindspots.labels._internal.stats import ArrayStats, CachedStats, PixelStats
from blindspots.data.classes import DEFAULT_IGNORE_INDEX

if TYPE_CHECKING:  # torch is heavy; the label engine itself needs only numpy
    from blindspots.models.adapters import Segmenter

log = logging.getLogger(__name__)

#: cleanlab.internal.constants: fuzzy comparison margin and lower bound of confident thresholds
FLOATING_POINT_COMPARISON = 1e-6
CONFIDENT_THRESHOLDS_LOWER_BOUND = 2 * FLOATING_POINT_COMPARISON


def open_stats(labels: Any = None, pred_probs: Any = None, *, model: Segmenter | None = None,
               dataset: Any = None, model_batch_size: int = 8, ignore_index: int | None = DEFAULT_IGNORE_INDEX,
               downsample: int = 1, batch_size: int | None = None, verbose: bool = True,
               atol: float = PROB_ATOL, cache_dir: str | os.PathLike | None = None) -> ArrayStats | CachedStats:
    """Wrap any supported input into a multi-pass source of per-pixel statistics."""
    src = as_batches(labels, pred_probs, model=model, dataset=dataset, model_batch_size=model_batch_size,
                     downsample=downsample)
    kw = dict(ignore_index=ignore_index, downsample=downsample, batch_size=batch_size, verbose=verbose, atol=atol)
    if isinstance(src, ArrayBatches):
        return ArrayStats(src, **kw)
    return CachedStats(src, cache_dir=cache_dir, **kw)


def _add_class_sums(s: PixelStats, sums: np.ndarray, counts: np.ndarray) -> None:
    """Accumulate per given class the sum and count of self-confidence over labelled pixels."""
    k = len(sums)
    if s.valid.all():  # common case: no ignored pixel, skip the boolean gathers
        lab, sc = s.labels.ravel(), s.score.ravel()
    else:
        lab, sc = s.labels[s.valid], s.score[s.valid]
    sums += np.bincount(lab, weights=sc, minlength=k)[:k]
    counts += np.bincount(lab, minlength=k)[:k]


class LabelIssueFinder:
    """Confident-learning label-issue finder for segmentation, streaming and resumable.

    Settings (defaults = cleanlab 2.x / the paper): downsample=1, ignore_index=255 (None: no ignore
    index), batch_size = probability values per chunk (None: ~2M), verbose (progress bars),
    cache_dir (for one-shot inputs; an explicit folder makes the model pass resumable), atol (tolerance
    for probabilities summing to 1).

    Memory: arrays at downsample=1 take one pass over pred_probs and keep ~5 bytes per pixel (the
    self-confidence in pred_probs' dtype and a flag) plus (class, probability) of pixels whose argmax
    differs from the label; every other input (iterables, models, downsample > 1) keeps nothing of
    size N in memory: per-pixel statistics go to flat files in cache_dir and are re-read in chunks.

    After `fit`: confident_thresholds_ float64 [K], num_issues_ (estimated count, at the analysis
    resolution), cutoff_ (self-confidence of the last flagged candidate, or None), n_images_, shape_ (H, W),
    or None when the images differ in size (iterables, model + dataset), and shapes_ int64 [N, 2] (each
    image's H, W).
    """

    def __init__(self, *, downsample: int = 1, ignore_index: int | None = DEFAULT_IGNORE_INDEX,
                 batch_size: int | None = None,
                 verbose: bool = True, cache_dir: str | os.PathLike | None = None, atol: float = PROB_ATOL) -> None:
        self.downsample = downsample
        self.ignore_index = ignore_index
        self.batch_size = batch_size
        self.verbose = verbose
        self.cache_dir = cache_dir
        self.atol = atol
        self._stats: ArrayStats | CachedStats | None = None
        self._mask: np.ndarray | None = None

    def _check_settings(self) -> None:
        check_positive_int(self.downsample, "downsample")
        self.ignore_index = check_ignore_index(self.ignore_index, negative=False)
        if self.batch_size is not None:
            check_positive_int(self.batch_size, "batch_size")
        if not (isinstance(self.atol, (int, float)) and self.atol >= 0):
            raise ValueError(f"atol: expected a number >= 0, got {self.atol!r}")

    def fit(self, labels: Any = None, pred_probs: Any = None, *, model: Segmenter | None = None,
            dataset: Any = None, model_batch_size: int = 8) -> "LabelIssueFinder":
        """Estimate thresholds, the number of issues and the score cut-off.

        labels: int [N, H, W] (array, memmap or .npy path), or an iterable of (labels, pred_probs) batches;
        pred_probs: float [N, K, H, W] summing to 1 over K (array, memmap or .npy path);
        or model (a Segmenter) + dataset (dataset[i] -> (image uint8 [H, W, 3], mask int [H, W])).
        """
        self._check_settings()
        self.close()
        self._stats = open_stats(labels, pred_probs, model=model, dataset=dataset,
                                 model_batch_size=model_batch_size, ignore_index=self.ignore_index,
                                 downsample=self.downsample, batch_size=self.batch_size, verbose=self.verbose,
                                 atol=self.atol, cache_dir=self.cache_dir)
        self._mask = None
        if isinstance(self._stats, ArrayStats) and self.downsample == 1:
            self._fit_in_memory(self._stats)
        else:
            self._fit_streaming(self._stats)
        return self

    def _set_thresholds(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Confident thresholds from per-class sums/counts of self-confidence; returns them minus the
        fuzzy margin, as cleanlab compares."""
        thr = np.divide(sums, counts, out=np.zeros(len(sums)), where=counts > 0)
        self.confident_thresholds_ = np.clip(thr, CONFIDENT_THRESHOLDS_LOWER_BOUND, None)
        self.class_counts_ = counts
        return self.confident_thresholds_ - FLOATING_POINT_COMPARISON

    def _fit_streaming(self, st: ArrayStats | CachedStats) -> None:
        """Multi-pass fit with memory flat in N (iterables, models, downsampling)."""
        k = st.num_classes
        # pass 1: confident thresholds (mean self-confidence per given class)
        sums = np.zeros(k, dtype=np.float64)
        counts = np.zeros(k, dtype=np.int64)
        for s, _ in st.passes("estimating thresholds", need_pred=False):
            _add_class_sums(s, sums, counts)
        adj = self._set_thresholds(sums, counts)
        # pass 2: number of issues and a histogram of self-confidence (top 16 bits) for exact selection
        num = 0
        hist = np.zeros(1 << 16, dtype=np.int64)
        for s, _ in st.passes("counting issues", need_pred=True):
            mism = s.valid & (s.pred != s.labels)
            num += int(np.count_nonzero(s.maxprob[mism] >= adj[s.pred[mism]]))
            hist += np.bincount(sortable_key(s.score[s.valid]), minlength=1 << 16)
        self._finish_count(st, num, hist)
        if self.num_issues_ > 0:
            # pass 3: exact cut-off value inside the histogram bin that holds the num_issues_-th score
            b, _ = self._cutoff_bin(hist)
            parts = []
            for s, _ in st.passes("selecting cut-off", need_pred=False):
                sc = s.score[s.valid]
                parts.append(sc[sortable_key(sc) == b])
            self._set_cutoff(hist, parts)

    def _fit_in_memory(self, st: ArrayStats) -> None:
        """One pass over pred_probs for arrays at full resolution: keeps the self-confidence (its dtype,
        +inf where ignored) and the argmax != label flag per pixel, i.e. 5 bytes per pixel for float32,
        plus (pred, maxprob) of mismatched pixels for the count."""
        k, n, h, w = st.num_classes, st.n, st.h, st.w
        score = np.empty((n, h, w), dtype=st.dtype)
        mask = np.empty((n, h, w), dtype=bool)
        sums = np.zeros(k, dtype=np.float64)
        counts = np.zeros(k, dtype=np.int64)
        mm_pred, mm_max = [], []
        for s, _ in st.passes("scoring pixels", need_pred=True):
            sl = slice(s.start, s.start + len(s))
            _add_class_sums(s, sums, counts)
            mm = s.valid & (s.pred != s.labels)
            mask[sl] = mm
            mm_pred.append(s.pred[mm])
            mm_max.append(s.maxprob[mm])
            sc = s.score
            sc[~s.valid] = np.inf  # never among the lowest: fewer issues than labelled pixels
            score[sl] = sc
        adj = self._set_thresholds(sums, counts)
        num = 0
        while mm_pred:  # count chunk by chunk, freeing as we go (no concatenated copy)
            pc, mc = mm_pred.pop(), mm_max.pop()
            num += int(np.count_nonzero(mc >= adj[pc]))
        flat, fmask = score.reshape(-1), mask.reshape(-1)
        step = 1 << 18  # small steps keep temporaries (bincount casts keys to intp) at a few MB
        hist = np.zeros(1 << 16, dtype=np.int64)
        inf_bin = int(sortable_key(np.array([np.inf], dtype=score.dtype))[0])
        for a in range(0, flat.size, step):
            c = flat[a:a + step]
            hist += np.bincount(sortable_key(c), minlength=1 << 16)
            hist[inf_bin] -= int(np.count_nonzero(c == np.inf))  # ignored pixels
        self._finish_count(st, num, hist)
        if self.num_issues_ == 0:
            mask[:] = False
        else:
            b, _ = self._cutoff_bin(hist)
            parts = []
            for a in range(0, flat.size, step):
                c = flat[a:a + step]
                parts.append(c[sortable_key(c) == b])
            self._set_cutoff(hist, parts)
            v, taken = self._cutoff_value, 0
            for a in range(0, flat.size, step):
                c = flat[a:a + step]
                sel = c < v
                if taken < self._take_ties:
                    ties = np.flatnonzero(c == v)[: self._take_ties - taken]
                    sel[ties] = True
                    taken += len(ties)
                fmask[a:a + step] &= sel
        self._mask = mask

    def _finish_count(self, st: ArrayStats | CachedStats, num: int, hist: np.ndarray) -> None:
        n_valid = int(hist.sum())
        self.num_issues_ = min(num, n_valid)
        self.n_images_ = st.n
        self.shapes_ = st.shapes
        self.shape_ = None if st.h is None else (st.h, st.w)
        self.n_valid_pixels_ = n_valid
        self.cutoff_, self._take_ties = None, 0

    def _cutoff_bin(self, hist: np.ndarray) -> tuple[int, int]:
        """(bin holding the num_issues_-th lowest score, number of scores in lower bins)."""
        cum = np.cumsum(hist)
        b = int(np.searchsorted(cum, self.num_issues_))
        return b, int(cum[b - 1]) if b > 0 else 0

    def _set_cutoff(self, hist: np.ndarray, parts: list[np.ndarray]) -> None:
        """Exact value of the num_issues_-th lowest score and how many of its ties are taken."""
        _, below = self._cutoff_bin(hist)
        k = self.num_issues_
        vals = np.sort(np.concatenate(parts))
        v = vals[k - below - 1]
        self.cutoff_ = float(v)
        self._cutoff_value = v
        self._take_ties = int(k - below - np.searchsorted(vals, v, side="left"))

    def iter_batches(self, with_stats: bool = True) -> Iterator[tuple[int, np.ndarray, PixelStats | None]]:
        """Yields (start, issues bool [b, H, W], full-resolution PixelStats with pred, or None when
        with_stats is False) chunk by chunk."""
        if self._stats is None or not hasattr(self, "num_issues_"):
            raise ValueError("self: expected a fitted LabelIssueFinder; call fit() first")
        if self._mask is not None:  # in-memory fit: the mask is already complete
            if not with_stats:
                step = self._stats.chunk
                for a in range(0, self.n_images_, step):
                    yield a, self._mask[a:a + step], None
                return
            for s, _ in self._stats.passes("reading statistics", need_pred=True):
                yield s.start, self._mask[s.start:s.start + len(s)], s
            return
        f = self.downsample
        taken = 0
        for s, full in self._stats.passes("checking labels", need_pred=f == 1, full=True):
            assert full is not None
            if self.cutoff_ is None:
                yield s.start, np.zeros(full.labels.shape, dtype=bool), full
                continue
            v = self._cutoff_value
            flagged = s.valid & (s.score < v)
            if self._take_ties > taken:
                ties = s.valid & (s.score == v)
                n_ties = int(np.count_nonzero(ties))
                if n_ties:
                    if taken + n_ties <= self._take_ties:
                        flagged |= ties
                    else:  # first ties in (image, row, column) order
                        flat = np.flatnonzero(ties)[: self._take_ties - taken]
                        flagged.ravel()[flat] = True
                    taken += min(n_ties, self._take_ties - taken)
            if f == 1:
                flagged &= s.pred != s.labels
            else:  # cleanlab: low-res candidates, then drop full-res pixels whose argmax equals the label
                flagged = upsample_mask(flagged, f) & full.valid & (full.pred != full.labels)
            yield s.start, flagged, full

    def transform(self, out: np.ndarray | str | os.PathLike | None = None) -> np.ndarray | list[np.ndarray]:
        """Issue mask bool [N, H, W]. out: None (new array), a writable bool array, or a .npy path
        (written as a memory-mapped file, so memory stays flat in N).

        Images of mixed sizes give a list of N masks bool [H_i, W_i] (out must be None)."""
        if getattr(self, "shape_", ()) is None:
            if out is not None:
                raise ValueError("out: expected None for images of different sizes (the masks are returned as a "
                                 "list of [H_i, W_i] arrays), got an output")
            masks: list[np.ndarray] = []
            for _, mask, _ in self.iter_batches(with_stats=False):
                masks += list(mask)
            return masks
        n, (h, w) = self.n_images_, self.shape_
        if out is None:
            res = np.zeros((n, h, w), dtype=bool)
        elif isinstance(out, (str, os.PathLike)):
            res = np.lib.format.open_memmap(Path(out), mode="w+", dtype=bool, shape=(n, h, w))
        else:
            res = out
            if getattr(res, "shape", None) != (n, h, w) or getattr(res, "dtype", None) != np.bool_:
                raise ValueError(f"out: expected a bool array of shape {(n, h, w)}, got "
                                 f"{getattr(res, 'dtype', type(res).__name__)} {getattr(res, 'shape', '')}")
        for start, mask, _ in self.iter_batches(with_stats=False):
            res[start:start + len(mask)] = mask
        if isinstance(res, np.memmap):
            res.flush()
        return res

    def close(self) -> None:
        """Release the statistics cache (temporary files)."""
        if self._stats is not None:
            self._stats.close()
            self._stats = None

    def __enter__(self) -> "LabelIssueFinder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def print_evaluated(finder: LabelIssueFinder) -> None:
    """cleanlab's verbose line on stdout (its LabelInspector prints it; a drop-in prints the same):
    the number of labelled pixels evaluated, at the analysis resolution (after `downsample`)."""
    print(f"Total number of examples whose labels have been evaluated: {finder.n_valid_pixels_}")


def find_label_issues(labels: Any = None, pred_probs: Any = None, *, batch_size: int | None = None,
                      n_jobs: int | None = None, verbose: bool = True, downsample: int = 1,
                      ignore_index: int | None = DEFAULT_IGNORE_INDEX, model: Segmenter | None = None,
                      dataset: Any = None,
                      model_batch_size: int = 8, out: np.ndarray | str | os.PathLike | None = None,
                      cache_dir: str | os.PathLike | None = None, atol: float = PROB_ATOL, **kwargs: Any
                      ) -> np.ndarray | list[np.ndarray]:
    """Boolean mask bool [N, H, W] of pixels whose given label is probably wrong (for an iterable or a
    dataset of images of mixed sizes: a list of N masks bool [H_i, W_i]).

    Drop-in for `cleanlab.segmentation.filter.find_label_issues` (same names, same answers at
    downsample=1 up to the order of exact ties at the cut-off), plus:

    labels: int [N, H, W] (array, np.memmap or .npy path) or an iterable of (labels int [b, H, W],
        pred_probs float [b, K, H, W]) batches (then pred_probs=None).
    pred_probs: float16/32/64 [N, K, H, W], probabilities summing to 1 over K (within `atol`).
    model, dataset: a `Segmenter` and a dataset of (image, mask) pairs instead of labels/pred_probs;
        probabilities are computed once, chunk by chunk, and never held whole.
    batch_size: probability values per chunk (cleanlab's meaning); changes memory, never results.
    n_jobs: accepted for compatibility and ignored: one vectorised process is faster than cleanlab's
        per-batch process pool at every size we measured.
    downsample: block size (paper/cleanlab default 1). Probabilities are block-averaged and
        renormalised like cleanlab; the block label is the *majority* label (cleanlab averages the class
        ids and rounds, inventing e.g. class 1 in a block half 0 and half 2).
    ignore_index: label value never flagged and excluded from thresholds, counts and ranking
        (default 255; None: every value must be a class id). cleanlab has no ignore index.
    out: where to write the mask (None: new array; a bool array; a .npy path -> memory-mapped file).
    cache_dir: folder for the per-pixel statistics of iterable/model inputs (default: temporary).
    verbose: progress bars (stderr) and cleanlab's closing line on stdout, "Total number of examples
        whose labels have been evaluated: M" (M labelled pixels; cleanlab's default n_jobs=None also
        prints a multiprocessing notice when psutil is missing, which has no meaning here).
    pred_probs that do not sum to 1 (e.g. np.random.random arrays, as in cleanlab's examples) are used
    as given, as cleanlab does, with one warning; NaN, inf and negative values raise.
    """
    if kwargs:
        raise ValueError(f"kwargs: expected only 'downsample' (cleanlab) besides named arguments, got "
                         f"{sorted(kwargs)}")
    del n_jobs
    finder = LabelIssueFinder(downsample=downsample, ignore_index=ignore_index, batch_size=batch_size,
                              verbose=verbose, cache_dir=cache_dir, atol=atol)
    with finder:
        finder.fit(labels, pred_probs, model=model, dataset=dataset, model_batch_size=model_batch_size)
        log.info("estimated %d label issues over %d images", finder.num_issues_, finder.n_images_)
        if verbose:
            print_evaluated(finder)
        if out is None and finder._mask is not None:
            return finder._mask  # the finder is discarded: hand over its mask without a copy
        return finder.transform(out)
