"""Compiled per-pixel passes of `scan.stats.model_stats` (numba): max, argmax, class counts and the
per-pixel sums of the entropy, over a contiguous range of one image's pixels.

Kept apart so that numba is imported (and these kernels compiled, then cached on disk) only when the
first statistics are taken. Classes are the outer loop and contiguous pixels the inner one, so LLVM
vectorises each pass over pixels. No fastmath: every float32 operation is rounded as numpy rounds it
(no fused multiply-add, no reordered sums), so the statistics are the same bits as numpy's passes.
The logarithm stays in numpy (its SIMD log is several times faster than numba's scalar one).
"""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _max_argmax_counts(p: np.ndarray, s: int, e: int, m: np.ndarray, a: np.ndarray, counts: np.ndarray) -> None:
    """m [e - s] = max over C of pixels [s, e) of p float32 [C, P], a [e - s] = argmax (strict >: the first
    maximum wins, as np.argmax), counts int64 [C] += pixels per argmax class. Inlined by its callers."""
    # zero-based views: loops over range(n) let LLVM drop numba's negative-index wraparound and vectorise
    c, n = p.shape[0], e - s
    p0 = p[0, s:e]
    for j in range(n):
        m[j] = p0[j]
        a[j] = 0
    for k in range(1, c):
        pk = p[k, s:e]
        for j in range(n):
            v = pk[j]
            if v > m[j]:
                m[j] = v
                a[j] = k
    _count(a, counts)


@numba.njit(cache=True, nogil=True)
def _count(a: np.ndarray, counts: np.ndarray) -> None:
    """counts int64 [C] += occurrences of each class id in a [n]. Four interleaved counters: one counter a
    pixel makes each increment wait for the last one to the same class (a map of few classes: nearly all);
    measured on one 512x512 map, 0.31 -> 0.05 ms (one class) and 0.67 -> 0.25 ms (two classes at random)."""
    sub = np.zeros((4, counts.shape[0]), dtype=np.int64)
    n = a.shape[0]
    q = n // 4
    for j in range(q):
        sub[0, a[4 * j]] += 1
        sub[1, a[4 * j + 1]] += 1
        sub[2, a[4 * j + 2]] += 1
        sub[3, a[4 * j + 3]] += 1
    for j in range(4 * q, n):
        sub[0, a[j]] += 1
    for k in range(counts.shape[0]):
        counts[k] += sub[0, k] + sub[1, k] + sub[2, k] + sub[3, k]


@numba.njit(cache=True, nogil=True)
def max_argmax_eps(p: np.ndarray, s: int, e: int, eps: np.float32, maxp: np.ndarray, idx: np.ndarray,
                   buf: np.ndarray, counts: np.ndarray) -> None:
    """Pixels [s, e) of one image p float32 [C, P] (C-contiguous):
    maxp [P] = max over C, idx [P] = argmax (strict >: the first maximum wins, as np.argmax),
    counts int64 [C] += pixels per argmax class, buf float32 [C, e - s] = p + eps (for the log).
    NaN never reaches here (outputs are validated upstream)."""
    c, n = p.shape[0], e - s
    _max_argmax_counts(p, s, e, maxp[s:e], idx[s:e], counts)
    for k in range(c):
        pk = p[k, s:e]
        bk = buf[k]
        for j in range(n):
            bk[j] = pk[j] + eps


@numba.njit(cache=True, nogil=True)
def plogp_sum(p: np.ndarray, s: int, e: int, logs: np.ndarray, ent: np.ndarray) -> None:
    """ent [P] at pixels [s, e) = sum over C of p * logs, in channel order (as numpy's sum over the
    class axis), where logs float32 [C, e - s] = log(p + eps) of those pixels."""
    c, n = p.shape[0], e - s
    t = ent[s:e]
    l0 = logs[0]
    p0 = p[0, s:e]
    for j in range(n):
        t[j] = l0[j] * p0[j]
    for k in range(1, c):
        pk = p[k, s:e]
        lk = logs[k]
        for j in range(n):
            t[j] += lk[j] * pk[j]


@numba.njit(cache=True, nogil=True)
def logit_max_shift(z: np.ndarray, s: int, e: int, maxz: np.ndarray, idx: np.ndarray, buf: np.ndarray,
                    counts: np.ndarray) -> None:
    """Pixels [s, e) of one image's logits z float32 [C, P] (C-contiguous): maxz [e - s] = max over C,
    idx [P] = argmax (strict >: the first maximum wins), counts int64 [C] += pixels per argmax class,
    buf float32 [C, e - s] = z - max (for numpy's exp: every value <= 0, so no overflow)."""
    c, n = z.shape[0], e - s
    _max_argmax_counts(z, s, e, maxz, idx[s:e], counts)
    for k in range(c):
        zk = z[k, s:e]
        bk = buf[k]
        for j in range(n):
            bk[j] = zk[j] - maxz[j]


@numba.njit(cache=True, nogil=True)
def exp_sums(z: np.ndarray, s: int, e: int, maxz: np.ndarray, exps: np.ndarray, total: np.ndarray,
             weighted: np.ndarray) -> None:
    """total [e - s] = sum over C of exps, weighted [e - s] = sum over C of exps * (z - max), in channel
    order, where exps float32 [C, e - s] = exp(z - max) of pixels [s, e) of z float32 [C, P]."""
    c, n = z.shape[0], e - s
    e0 = exps[0]
    z0 = z[0, s:e]
    for j in range(n):
        total[j] = e0[j]
        weighted[j] = e0[j] * (z0[j] - maxz[j])
    for k in range(1, c):
        ek = exps[k]
        zk = z[k, s:e]
        for j in range(n):
            total[j] += ek[j]
            weighted[j] += ek[j] * (zk[j] - maxz[j])


@numba.njit(cache=True, nogil=True)
def two_class_shift(z: np.ndarray, s: int, e: int, idx: np.ndarray, buf: np.ndarray, counts: np.ndarray) -> None:
    """`logit_max_shift` for C = 2, whose softmax needs one exp a pixel: for d = z1 - z0, idx [P] at pixels
    [s, e) = 1 where d > 0 (z0 wins ties, as np.argmax), counts int64 [2] += pixels per class, buf
    float32 [e - s] = -|d| (the other class's z - max; the larger's is 0)."""
    n = e - s
    a = idx[s:e]
    z0, z1 = z[0, s:e], z[1, s:e]
    for j in range(n):
        d = z1[j] - z0[j]
        a[j] = 1 if d > 0 else 0
        buf[j] = -abs(d)
    _count(a, counts)


@numba.njit(cache=True, nogil=True)
def two_class_sums(shift: np.ndarray, exps: np.ndarray, total: np.ndarray, weighted: np.ndarray) -> None:
    """`exp_sums` for C = 2 from shift = -|d| and exps = exp(shift) (float32 [n]): S = 1 + exp(-|d|) and
    T = exp(-|d|) * (-|d|) (the larger class adds exp(0) = 1 to S and 0 to T)."""
    for j in range(total.shape[0]):
        total[j] = np.float32(1.0) + exps[j]
        weighted[j] = exps[j] * shift[j]


@numba.njit(cache=True, nogil=True, error_model="numpy")  # no zero-division check: the loop vectorises (S >= 1)
def entropy_maxprob(log_total: np.ndarray, total: np.ndarray, weighted: np.ndarray, ent: np.ndarray,
                    maxp: np.ndarray) -> None:
    """Per pixel, from S = sum exp(z - max), T = sum exp(z - max) (z - max) and log S: the entropy of the
    softmax log S - T / S (nats) into ent, and its largest probability 1 / S into maxp (all float32 [n]).
    (Summing them here instead, in float64, was slower: a serial sum does not vectorise.)"""
    for j in range(total.shape[0]):
        ent[j] = log_total[j] - weighted[j] / total[j]
        maxp[j] = np.float32(1.0) / total[j]
