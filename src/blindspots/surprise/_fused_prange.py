"""The fused MDSA map's per-image passes written the standard way: numba ``prange`` over images.

The same per-image kernels as ``_fused_parallel`` (``_fused_kernels.*_image``), spread over images by
numba's own parallel loop instead of torch's OpenMP threads through ``_omp``. Kept so that
``benchmarks/surprise.py --only forward`` measures the two side by side on the same passes (the
hand-made path is kept only where it is clearly faster; see docs/surprise.md, "Speed"). Images are
independent, so both give the one-thread results bit for bit. The whitening stays torch.mm
(``fused._whiten_marked``): there is no one-call-per-image path here.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import numba
import numpy as np
import torch

from blindspots.surprise import _fused_kernels as k


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    """numba's thread count for the calling thread (numba.set_num_threads is per thread): as many as torch
    uses, at most n images; the caller's counts are put back after.

    torch's too: numba's first parallel use in a process starts its threading layer, which (the "omp"
    layer, on the libgomp torch uses) sets the calling thread's OpenMP count, torch's count, to numba's."""
    mine = torch.get_num_threads()
    old = numba.get_num_threads()  # starts numba's threading layer on first use
    numba.set_num_threads(max(1, min(mine, numba.config.NUMBA_NUM_THREADS, n)))
    try:
        yield
    finally:
        numba.set_num_threads(old)
        if torch.get_num_threads() != mine:
            torch.set_num_threads(mine)


@numba.njit(parallel=True, nogil=True, cache=True)
def _argmax_mark(scores, last, pred, lut, y0, y1, x0, x1, mark, counts, span):
    for i in numba.prange(pred.shape[0]):
        k.argmax_mark_image(scores, last, pred, lut, y0, y1, x0, x1, mark, counts, span, i)


@numba.njit(parallel=True, nogil=True, cache=True)
def _mark(pred, lut, y0, y1, x0, x1, mark, counts, span):
    for i in numba.prange(pred.shape[0]):
        k.mark_image(pred, lut, y0, y1, x0, x1, mark, counts, span, i)


@numba.njit(parallel=True, nogil=True, cache=True)
def _gather(mark, cells, means, offsets, pos, centred):
    for i in numba.prange(mark.shape[1]):
        k.gather_image(mark, cells, means, offsets, pos, centred, i)


@numba.njit(parallel=True, nogil=True, cache=True)
def _tables(mark, pos, z, corners, offsets, counts, nrm, nxt, table):
    for i in numba.prange(mark.shape[1]):
        k.tables_image(mark, pos, z, corners, offsets, counts, nrm, nxt, table, i)


@numba.njit(parallel=True, nogil=True, cache=True)
def _pixels(pred, lut, y0, ry, x0, qx, pos, table, out):
    for i in numba.prange(pred.shape[0]):
        k.pixel_image(pred, lut, y0, ry, x0, qx, pos, table, out, i)


def argmax_mark(scores: np.ndarray, channels_last: bool, pred, lut, y0, y1, x0, x1, mark_, counts, span) -> None:
    """As ``_fused_parallel.argmax_mark``."""
    with _threads(pred.shape[0]):
        _argmax_mark(scores, channels_last, pred, lut, y0, y1, x0, x1, mark_, counts, span)


def mark(pred, lut, y0, y1, x0, x1, mark_, counts, span) -> None:
    """As ``_fused_parallel.mark``."""
    with _threads(pred.shape[0]):
        _mark(pred, lut, y0, y1, x0, x1, mark_, counts, span)


def gather(mark_, cells, means, offsets, pos, centred) -> None:
    """As ``_fused_parallel.gather``."""
    with _threads(mark_.shape[1]):
        _gather(mark_, cells, means, offsets, pos, centred)


def tables(mark_, pos, z, corners: bool, offsets, counts, nrm, nxt, table) -> None:
    """As ``_fused_parallel.tables``."""
    with _threads(mark_.shape[1]):
        _tables(mark_, pos, z, corners, offsets, counts, nrm, nxt, table)


def pixels(pred, lut, y0, ry, x0, qx, pos, table, out) -> None:
    """As ``_fused_parallel.pixels``."""
    with _threads(pred.shape[0]):
        _pixels(pred, lut, y0, ry, x0, qx, pos, table, out)
