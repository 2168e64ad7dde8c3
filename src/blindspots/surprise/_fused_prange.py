"""The fused MDSA map's per-image passes (``_fused_kernels.*_image``), spread over images by numba's own
parallel loop (``prange``), as many threads as torch uses. Images are independent, so any split gives the
one-thread results bit for bit. The whitening is torch.mm per class (``fused._whiten_marked``).
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


@numba.njit(parallel=True, nogil=True, cache=True)
def _argmax(y, out, last):
    for i in numba.prange(out.shape[0]):
        k.argmax_image(y, out, last, i)


def argmax(y: np.ndarray, out: np.ndarray, channels_last: bool) -> None:
    """out int64 [n, H, W] = argmax over the channels of y float32 ([n, H, W, C] when `channels_last`,
    else [n, C, H, W]; C-contiguous), as ``_fused_kernels.argmax_image``, one image per iteration."""
    with _threads(out.shape[0]):
        _argmax(y, out, bool(channels_last))


def argmax_mark(scores: np.ndarray, channels_last: bool, pred, lut, y0, y1, x0, x1, mark_, counts, span) -> None:
    """``_fused_kernels.argmax_mark_image`` of every image (arguments as there; mark_ and counts zeroed)."""
    with _threads(pred.shape[0]):
        _argmax_mark(scores, channels_last, pred, lut, y0, y1, x0, x1, mark_, counts, span)


def mark(pred, lut, y0, y1, x0, x1, mark_, counts, span) -> None:
    """``_fused_kernels.mark_image`` of every image (arguments as there; mark_ and counts zeroed)."""
    with _threads(pred.shape[0]):
        _mark(pred, lut, y0, y1, x0, x1, mark_, counts, span)


def gather(mark_, cells, means, offsets, pos, centred) -> None:
    """``_fused_kernels.gather_image`` of every image (arguments as there)."""
    with _threads(mark_.shape[1]):
        _gather(mark_, cells, means, offsets, pos, centred)


def tables(mark_, pos, z, corners: bool, offsets, counts, nrm, nxt, table) -> None:
    """``_fused_kernels.tables_image`` of every image (arguments as there)."""
    with _threads(mark_.shape[1]):
        _tables(mark_, pos, z, corners, offsets, counts, nrm, nxt, table)


def pixels(pred, lut, y0, ry, x0, qx, pos, table, out) -> None:
    """``_fused_kernels.pixel_image`` of every image (arguments as there)."""
    with _threads(pred.shape[0]):
        _pixels(pred, lut, y0, ry, x0, qx, pos, table, out)
