"""Compiled per-pixel passes (numba): one read of pred_probs gives every per-pixel statistic.

`scan` walks each image row once and fills, per pixel: the probability of the given label (exact
gather), and optionally the argmax (first maximum, as numpy) and the maximum; with `check` it counts
pixels with a non-finite or negative value and pixels whose class sum is off 1 (the label masks are
numpy passes over the small label array). numpy needs one pass over pred_probs per statistic and a
`take_along_axis` index array for the gather; this is one memory-bound pass. `softmin` pools pixel
scores per image.

Kept apart so numba is imported (and the kernels compiled, then cached on disk) only when used.
"""
from __future__ import annotations

import llvmlite.binding
import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

#: LLVM's prefetch intrinsic (its pointer suffix changed with opaque pointers in LLVM 15)
_PREFETCH = "llvm.prefetch.p0" if llvmlite.binding.llvm_version_info >= (15,) else "llvm.prefetch.p0i8"


@intrinsic
def _prefetch(typingctx, arr, i, c, y, x):
    """Hint the cache line of arr[i, c, y, x] into cache (a read, kept in all levels); never faults."""
    sig = types.void(arr, types.intp, types.intp, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, list(args[1:]), wraparound=False)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            _PREFETCH)
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(cache=True, nogil=True)
def _row_check(probs, i, y, atol, acc, low):
    """Count the pixels of row y of image i whose class sum is not finite or that hold a value below
    -atol (bad), and those whose class sum is off 1 by more than atol (off): (bad, off).

    acc, low: [W] scratch in probs' dtype (its precision is far below atol). Selects rather than
    min(): numba's min() orders NaN and does not vectorise; a NaN shows in the sum."""
    k, w = probs.shape[1], probs.shape[3]
    for x in range(w):
        acc[x] = 0.0
        low[x] = 1.0
    for c in range(k):
        for x in range(w):
            v = probs[i, c, y, x]
            acc[x] += v
            low[x] = v if v < low[x] else low[x]
    bad = 0
    off = 0
    for x in range(w):
        s = acc[x]
        finite = abs(s) < np.inf  # False for NaN and inf
        bad += (not finite) or low[x] < -atol
        off += finite and abs(s - 1.0) > atol
    return bad, off


@numba.njit(cache=True, nogil=True)
def _row_argmax(probs, i, y, pred, maxprob):
    """Argmax (strict >: the first maximum wins, as numpy's argmax) and maximum of row y of image i."""
    k, w = probs.shape[1], probs.shape[3]
    for x in range(w):
        maxprob[i, y, x] = probs[i, 0, y, x]
        pred[i, y, x] = 0
    for c in range(1, k):
        for x in range(w):
            v = probs[i, c, y, x]
            if v > maxprob[i, y, x]:
                maxprob[i, y, x] = v
                pred[i, y, x] = c


@numba.njit(cache=True, nogil=True)
def _scan(labels, probs, check, row_step, need_pred, atol, score, pred, maxprob, counts):
    """labels int [b, H, W]; probs float32|float64 [b, K, H, W] (C order); outputs as in `scan`.

    counts: int64 [3]: [1] += pixels of checked rows with a non-finite or negative value, [2] += those
    whose class sum is off 1. With check, every value of every row_step-th row is checked (its K planes
    are read in order and stay in cache for the argmax and the gather). The gather is branch-free
    (labels change from pixel to pixel) and alone in its loop: the masks, in the same loop, made it
    twice as slow; numpy's vectorised passes do them for less in `scan`.
    """
    b, k, h, w = probs.shape
    acc = np.empty(w, probs.dtype)
    low = np.empty(w, probs.dtype)
    for i in range(b):
        for y in range(h):
            full = check and y % row_step == 0
            if full:
                bad, off = _row_check(probs, i, y, atol, acc, low)
                counts[1] += bad
                counts[2] += off
            if need_pred:
                _row_argmax(probs, i, y, pred, maxprob)
            nxt = y + 1
            if not need_pred and nxt < h and not (check and nxt % row_step == 0):
                # the next row's gather addresses depend on its labels, so the hardware prefetchers (which
                # stop at 4 KB pages; a class plane's row is W values) miss them: hint the two cache lines
                # at the ends of every 16 pixels one row ahead (measured ~10-30% off the gather under load)
                lnext = labels[i, nxt]
                for x in range(0, w, 16):
                    x1 = min(x + 15, w - 1)
                    _prefetch(probs, i, lnext[x], nxt, x)
                    _prefetch(probs, i, lnext[x1], nxt, x1)
            lrow, srow = labels[i, y], score[i, y]
            plane = probs[i, :, y, :]  # [K, W] view of this row
            for x in range(w):  # the gather alone: labels are class ids here (`scan` replaces others)
                srow[x] = plane[lrow[x], x]


def scan(labels: np.ndarray, probs: np.ndarray, ignore_index: int | None, *, check: bool, need_pred: bool,
         atol: float, score: np.ndarray | None = None, row_step: int = 1
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]:
    """One pass over a chunk.

    labels: int [b, H, W]; probs: float32|float64 [b, K, H, W]; score: optional output [b, H, W] of
    probs' dtype. check: validate every value of every `row_step`-th image row and the label's
    probability of every pixel (row_step > 1 spares reading all K planes when only the label's
    probability is needed). Returns (score [b, H, W] probs' dtype, 1.0 where not a class id; valid
    bool [b, H, W]; pred uint8|uint16 [b, H, W] or None; maxprob [b, H, W] or None; counts int64 [3]:
    labels neither a class id nor ignore_index, pixels with a non-finite or negative value, pixels
    whose class sum is off 1 by more than atol). The caller raises or warns.
    """
    probs = np.ascontiguousarray(probs)
    labels = np.ascontiguousarray(labels)
    b, k, h, w = probs.shape
    if score is None:
        score = np.empty((b, h, w), dtype=probs.dtype)
    pdt = np.uint8 if k < 255 else np.uint16  # the dtype of pixels.argmax_max
    pred = np.empty((b, h, w) if need_pred else (0, 0, 0), dtype=pdt)
    maxprob = np.empty((b, h, w) if need_pred else (0, 0, 0), dtype=probs.dtype)
    counts = np.zeros(3, dtype=np.int64)
    # two reductions instead of a bool array and its all(): the mask is built only when some label is
    # not a class id
    signed = labels.dtype.kind == "i"
    all_ids = labels.size == 0 or (int(labels.max()) < k and (not signed or int(labels.min()) >= 0))
    k_ok = None if all_ids else ((labels < k) & (labels >= 0) if signed else labels < k)
    ign = None
    if ignore_index is not None and (not all_ids or 0 <= ignore_index < k):
        ign = labels == ignore_index  # only computed where it can matter
    if all_ids and (ign is None or not ign.any()):  # the common case: every pixel labelled with a class id
        valid = np.ones(labels.shape, dtype=bool)
        safe = labels
    else:
        if k_ok is None:
            k_ok = np.ones(labels.shape, dtype=bool)
        valid = k_ok if ign is None else k_ok & ~ign
        counts[0] = valid.size - np.count_nonzero(k_ok if ign is None else k_ok | ign)
        # the kernel gathers without bounds checks: labels that are not class ids become 0
        safe = labels if all_ids else np.where(k_ok, labels, 0).astype(labels.dtype, copy=False)
    _scan(safe, probs, check, max(int(row_step), 1), need_pred, float(atol), score, pred, maxprob, counts)
    if ign is not None or not all_ids:
        np.copyto(score, 1.0, where=~valid)
    if check and row_step > 1:  # the label's probability of every pixel (ignored ones are 1.0 now)
        lo = score.min()
        if not (np.isfinite(lo) and lo >= -atol and np.isfinite(score.max())):
            counts[1] += 1
    return score, valid, (pred if need_pred else None), (maxprob if need_pred else None), counts


@numba.njit(cache=True, nogil=True, fastmath={"nnan", "ninf", "nsz", "reassoc"})
def _softmin_exponents(s, m, inv_t, x):
    """The shifted softmin exponents x = (m - s) / T in float64, m = min s (the shift cleanlab applies:
    (1 - s)/T - max((1 - s)/T)). s holds finite values (checked by `scan`), so fast-math only lets the
    loop vectorise. The minimum comes from numpy: numba's min reduction does not vectorise (measured
    ~20x slower than numpy's, most of the pooling's time)."""
    mf = np.float64(m)
    for j in range(s.size):
        x[j] = (mf - np.float64(s[j])) * inv_t


@numba.njit(cache=True, nogil=True, fastmath={"nnan", "ninf", "nsz", "reassoc"})
def _softmin_sums(s, e):
    """sum(s * e) / sum(e) (reassociated into vector lanes: partial sums, as accurate as numpy's
    pairwise sum at these sizes)."""
    a = 0.0
    z = 0.0
    for j in range(s.size):
        a += np.float64(s[j]) * e[j]
        z += e[j]
    return a / z


def softmin(scores: np.ndarray, valid: np.ndarray | None, temperature: float,
            work: list[np.ndarray] | None = None) -> np.ndarray:
    """Softmin pooling per image, float64 like cleanlab: sum_i s_i w_i, w = softmax((1 - s)/T).

    scores: float [b, H, W]; valid: bool [b, H, W] or None (all labelled) -> float64 [b]; images
    without a labelled pixel give 1.0. The exponentials run in numpy (vectorised), the rest compiled.
    work: a list the caller keeps across chunks, holding a float64 scratch row (a fresh megabyte
    buffer per chunk costs more in page faults than the arithmetic).
    """
    b = scores.shape[0]
    s2 = scores.reshape(b, -1)
    if s2.dtype not in (np.float32, np.float64):
        s2 = s2.astype(np.float64)
    s2 = np.ascontiguousarray(s2)
    v2 = None if valid is None else valid.reshape(b, -1)
    work = [] if work is None else work
    if not work or len(work[0]) < s2.shape[1]:
        work[:] = [np.empty(s2.shape[1])]
    inv_t = 1.0 / temperature
    out = np.ones(b, dtype=np.float64)
    for i in range(b):
        si = s2[i] if v2 is None or v2[i].all() else s2[i][v2[i]]
        if si.size == 0:
            continue
        x = work[0][:si.size]
        _softmin_exponents(si, si.min(), inv_t, x)
        np.exp(x, out=x)
        out[i] = _softmin_sums(si, x)
    return out
