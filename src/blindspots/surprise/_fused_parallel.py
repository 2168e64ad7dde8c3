"""The fused MDSA map's per-image passes on torch's OpenMP threads (``_omp.run``): one call per kernel.

Each packs its arrays by the kernel's declared signature (``_fused_kernels.MARK`` etc.: names, dtypes and
dimensions, checked here) for the kernel's trampoline (``*_chunks``), which runs the kernel on every
image it takes from the shared counter. Images are independent (each writes only its own rows and
cells), so any split gives the one-thread results bit for bit.
"""
from __future__ import annotations

import numpy as np

from blindspots.surprise import _fused_kernels as k
from blindspots.surprise._omp import run


def argmax(y: np.ndarray, out: np.ndarray, channels_last: bool, threads: int | None = None) -> None:
    """out int64 [n, H, W] = argmax over the channels of y float32 ([n, H, W, C] when `channels_last`,
    else [n, C, H, W]; C-contiguous), as ``_fused_kernels.argmax_image``, one image per chunk."""
    run(k.argmax_chunks, k.ARGMAX.pack(y=y, out=out, last=bool(channels_last)), threads)


def mark(pred, lut, y0, y1, x0, x1, mark_, counts, span, threads: int | None = None) -> None:
    """``_fused_kernels.mark_image`` of every image (arguments as there; mark_ and counts zeroed)."""
    run(k.mark_chunks, k.MARK.pack(pred=pred, lut=lut, y0=y0, y1=y1, x0=x0, x1=x1, mark=mark_, counts=counts,
                                   span=span), threads)


def argmax_mark(scores, channels_last: bool, pred, lut, y0, y1, x0, x1, mark_, counts, span,
                threads: int | None = None) -> None:
    """``_fused_kernels.argmax_mark_image`` of every image (arguments as there; mark_ and counts zeroed)."""
    run(k.argmax_mark_chunks, k.ARGMAX_MARK.pack(scores=scores, last=bool(channels_last), pred=pred, lut=lut, y0=y0,
                                                 y1=y1, x0=x0, x1=x1, mark=mark_, counts=counts, span=span), threads)


def gather(mark_, cells, means, offsets, pos, centred, threads: int | None = None) -> None:
    """``_fused_kernels.gather_image`` of every image (arguments as there)."""
    run(k.gather_chunks, k.GATHER.pack(mark=mark_, cells=cells, means=means, offsets=offsets, pos=pos,
                                       centred=centred), threads)


def tables(mark_, pos, z, corners: bool, offsets, counts, nrm, nxt, table, threads: int | None = None) -> None:
    """``_fused_kernels.tables_image`` of every image (arguments as there)."""
    run(k.tables_chunks, k.TABLES.pack(mark=mark_, pos=pos, z=z, corners=bool(corners), offsets=offsets,
                                       counts=counts, nrm=nrm, nxt=nxt, table=table), threads)


def pixels(pred, lut, y0, ry, x0, qx, pos, table, out, threads: int | None = None) -> None:
    """``_fused_kernels.pixel_image`` of every image (arguments as there)."""
    run(k.pixels_chunks, k.PIXELS.pack(pred=pred, lut=lut, y0=y0, ry=ry, x0=x0, qx=qx, pos=pos, table=table,
                                       out=out), threads)


def image_mdsa(scores, channels_last: bool, pred, lut, y0, y1, x0, x1, mark_, counts, span, cells, means, whiten,
               ry, qx, corners: bool, blas: int, pos, out, threads: int | None = None) -> None:
    """``_fused_kernels.image_mdsa`` of every image (arguments as there; mark_ and counts zeroed)."""
    run(k.image_mdsa_chunks, k.IMAGE_MDSA.pack(
        scores=scores, last=bool(channels_last), pred=pred, lut=lut, y0=y0, y1=y1, x0=x0, x1=x1, mark=mark_,
        counts=counts, span=span, cells=cells, means=means, whiten=whiten, ry=ry, qx=qx, corners=bool(corners),
        blas=int(blas), pos=pos, out=out), threads)
