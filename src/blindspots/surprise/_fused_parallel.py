"""The fused MDSA map's per-image passes on torch's OpenMP threads (``_omp.run``): one call per kernel.

Each packs its arrays (``_omp.pack``: address, then shape, in the order of the kernel's arguments) for
the kernel's trampoline in ``_fused_kernels`` (``*_chunks``), which runs the kernel on every image it
takes from the shared counter. Images are independent (each writes only its own rows and cells), so
any split gives the one-thread results bit for bit.
"""
from __future__ import annotations

import numpy as np

from blindspots.surprise import _fused_kernels as k
from blindspots.surprise._omp import pack, run


def argmax(y: np.ndarray, out: np.ndarray, channels_last: bool, threads: int | None = None) -> None:
    """out int64 [n, H, W] = argmax over the channels of y float32 ([n, H, W, C] when `channels_last`,
    else [n, C, H, W]; C-contiguous), as ``_fused_kernels.argmax_image``, one image per chunk."""
    run(k.argmax_chunks, pack(y.shape[0], y, out, int(channels_last)), threads)


def mark(pred, lut, y0, y1, x0, x1, mark_, counts, span, threads: int | None = None) -> None:
    """``_fused_kernels.mark_image`` of every image (arguments as there; mark_ and counts zeroed)."""
    run(k.mark_chunks, pack(pred.shape[0], pred, lut, y0, y1, x0, x1, mark_, counts, span), threads)


def argmax_mark(scores, channels_last: bool, pred, lut, y0, y1, x0, x1, mark_, counts, span,
                threads: int | None = None) -> None:
    """``_fused_kernels.argmax_mark_image`` of every image (arguments as there; mark_ and counts zeroed)."""
    run(k.argmax_mark_chunks, pack(pred.shape[0], scores, int(channels_last), pred, lut, y0, y1, x0, x1, mark_, counts,
                           span), threads)


def gather(mark_, cells, means, offsets, pos, centred, threads: int | None = None) -> None:
    """``_fused_kernels.gather_image`` of every image (arguments as there)."""
    run(k.gather_chunks, pack(mark_.shape[1], mark_, cells, means, offsets, pos, centred), threads)


def tables(mark_, pos, z, corners: bool, offsets, counts, nrm, nxt, table, threads: int | None = None) -> None:
    """``_fused_kernels.tables_image`` of every image (arguments as there)."""
    run(k.tables_chunks, pack(mark_.shape[1], mark_, pos, z, int(corners), offsets, counts, nrm, nxt, table), threads)


def pixels(pred, lut, y0, ry, x0, qx, pos, table, out, threads: int | None = None) -> None:
    """``_fused_kernels.pixel_image`` of every image (arguments as there)."""
    run(k.pixels_chunks, pack(pred.shape[0], pred, lut, y0, ry, x0, qx, pos, table, out), threads)


def image_mdsa(scores, channels_last: bool, pred, lut, y0, y1, x0, x1, mark_, counts, span, cells, means, whiten,
               ry, qx, corners: bool, blas: int, pos, out, threads: int | None = None) -> None:
    """``_fused_kernels.image_mdsa`` of every image (arguments as there; mark_ and counts zeroed)."""
    run(k.image_mdsa_chunks, pack(pred.shape[0], scores, int(channels_last), pred, lut, y0, y1, x0, x1, mark_, counts, span,
                          cells, means, whiten, ry, qx, int(corners), blas, pos, out), threads)
