"""Compiled check of a probability output (numba): per-pixel sums over the classes, smallest and
largest value, in one read of the output.

Kept apart so that numba is imported (and the kernel compiled, then cached on disk) only when a
model's probabilities are first validated. No fastmath: the sums are float32 additions in channel
order, the same bits as numpy's sum over the class axis (for more than one pixel per image).
"""
from __future__ import annotations

import numba
import numpy as np

BLOCK = 1 << 13  # pixels per block: the per-pixel accumulators stay in the L1 cache


@numba.njit(cache=True, nogil=True)
def sums_range(p: np.ndarray) -> tuple[bool, float, float, float]:
    """p float32 [N, C, P] (C-contiguous, C >= 1, P >= 1) -> (every per-pixel sum over C is finite,
    smallest value, largest value, largest |sum - 1| in float32). With a non-finite sum the other
    three are meaningless (a NaN compares false); the caller then takes numpy's path."""
    n, c, npx = p.shape
    acc = np.empty(BLOCK, dtype=np.float32)
    lo = np.empty(BLOCK, dtype=np.float32)
    hi = np.empty(BLOCK, dtype=np.float32)
    one = np.float32(1.0)
    finite = True
    vmin = np.inf
    vmax = -np.inf
    worst = np.float32(0.0)
    for i in range(n):
        for s in range(0, npx, BLOCK):
            m = min(BLOCK, npx - s)
            p0 = p[i, 0, s:s + m]
            for j in range(m):
                v = p0[j]
                acc[j] = v
                lo[j] = v
                hi[j] = v
            for k in range(1, c):
                pk = p[i, k, s:s + m]
                for j in range(m):
                    v = pk[j]
                    acc[j] += v
                    lo[j] = v if v < lo[j] else lo[j]
                    hi[j] = v if v > hi[j] else hi[j]
            for j in range(m):
                a = acc[j]
                finite = finite and abs(a) < np.inf
                d = abs(a - one)
                worst = d if d > worst else worst
                vmin = lo[j] if lo[j] < vmin else vmin
                vmax = hi[j] if hi[j] > vmax else vmax
    return finite, vmin, vmax, float(worst)
