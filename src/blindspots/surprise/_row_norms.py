"""Compiled row norms for MDSA scoring (numba): ||z_i - b|| of a cache-resident block, written as float64.

Kept apart so numba is imported (and the kernel compiled, then cached on disk) only when MDSA scores.
One compiled pass over a cache-resident block is faster than ``torch.linalg.vector_norm(z, dim=1)``
(figures in docs/benchmarks.md), and the float64 output needs no separate cast pass.
"""
from __future__ import annotations

import numba
import numpy as np

_FAST = {"nnan", "ninf", "nsz", "reassoc", "contract"}


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def row_norms(z: np.ndarray, out: np.ndarray) -> None:
    """out float64 [b] = sqrt(sum_j z[i, j]^2) of z float32 [b, D] (C-contiguous), summed in float32 in
    vector lanes like torch's norm, the square root taken in float32 as torch's float32 norm does."""
    for i in range(z.shape[0]):
        row = z[i]
        acc = np.float32(0.0)
        for j in range(row.size):
            acc += row[j] * row[j]
        out[i] = np.float64(np.sqrt(acc))


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def shifted_row_norms(z: np.ndarray, shift: np.ndarray, out: np.ndarray) -> None:
    """out float64 [b] = ||z[i] - shift|| of z float32 [b, D] (C-contiguous) and shift float32 [D]: the
    centring of uncentred whitened rows (z = a W^T, shift = mu W^T) fused into the norm, as `row_norms`."""
    for i in range(z.shape[0]):
        row = z[i]
        acc = np.float32(0.0)
        for j in range(row.size):
            v = row[j] - shift[j]
            acc += v * v
        out[i] = np.float64(np.sqrt(acc))
