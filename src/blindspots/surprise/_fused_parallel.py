"""The fused MDSA map's per-image passes on torch's OpenMP threads (``_omp``): one trampoline per kernel.

Each trampoline unpacks the arrays that ``_omp.pack`` laid out (address, then shape; in the order of
the kernel's arguments, a trailing int where the kernel takes one) and runs the kernel of
``_fused_kernels`` on every image it takes from the shared counter. Images are independent (each
writes only its own rows and cells), so any split gives the one-thread results bit for bit.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types

from blindspots.surprise import _fused_kernels as k
from blindspots.surprise._omp import HEADER, f32_at, i32_at, i64_at, int64_slots, next_chunk, pack, run, u8_at

_SIG = types.void(types.voidptr)
_SLOTS = 64  # upper bound on a packed argument array's length (never read past its end)


@numba.njit(inline="always")
def _marking(a, o):
    """The marking pass's arrays (lut, y0, y1, x0, x1, mark, counts, span) packed from slot o of a on."""
    lut = numba.carray(i64_at(a[o]), (a[o + 1],))
    y0 = numba.carray(i64_at(a[o + 2]), (a[o + 3],))
    y1 = numba.carray(i64_at(a[o + 4]), (a[o + 5],))
    x0 = numba.carray(i64_at(a[o + 6]), (a[o + 7],))
    x1 = numba.carray(i64_at(a[o + 8]), (a[o + 9],))
    o += 10
    mark = numba.carray(u8_at(a[o]), (a[o + 1], a[o + 2], a[o + 3], a[o + 4]))
    o += 5
    counts = numba.carray(i64_at(a[o]), (a[o + 1], a[o + 2]))
    span = numba.carray(i64_at(a[o + 3]), (a[o + 4], a[o + 5]))
    return lut, y0, y1, x0, x1, mark, counts, span


@numba.cfunc(_SIG, cache=True)
def _argmax(data):
    a = numba.carray(int64_slots(data), _SLOTS)
    o = HEADER
    y = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2], a[o + 3], a[o + 4]))
    o += 5
    out = numba.carray(i64_at(a[o]), (a[o + 1], a[o + 2], a[o + 3]))
    last = a[o + 4] != 0
    i = next_chunk(data)
    while i < a[1]:
        k.argmax_image(y, out, i, last)
        i = next_chunk(data)


@numba.cfunc(_SIG, cache=True)
def _mark(data):
    a = numba.carray(int64_slots(data), _SLOTS)
    o = HEADER
    pred = numba.carray(i64_at(a[o]), (a[o + 1], a[o + 2], a[o + 3]))
    o += 4
    lut, y0, y1, x0, x1, mark, counts, span = _marking(a, o)
    i = next_chunk(data)
    while i < a[1]:
        k.mark_image(pred, lut, y0, y1, x0, x1, mark, counts, span, i)
        i = next_chunk(data)


@numba.cfunc(_SIG, cache=True)
def _argmax_mark(data):
    a = numba.carray(int64_slots(data), _SLOTS)
    o = HEADER
    scores = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2], a[o + 3], a[o + 4]))
    last = a[o + 5] != 0
    o += 6
    pred = numba.carray(i64_at(a[o]), (a[o + 1], a[o + 2], a[o + 3]))
    o += 4
    lut, y0, y1, x0, x1, mark, counts, span = _marking(a, o)
    i = next_chunk(data)
    while i < a[1]:
        k.argmax_mark_image(scores, last, pred, lut, y0, y1, x0, x1, mark, counts, span, i)
        i = next_chunk(data)


@numba.cfunc(_SIG, cache=True)
def _gather(data):
    a = numba.carray(int64_slots(data), _SLOTS)
    o = HEADER
    mark = numba.carray(u8_at(a[o]), (a[o + 1], a[o + 2], a[o + 3], a[o + 4]))
    o += 5
    cells = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2], a[o + 3], a[o + 4]))
    o += 5
    kept = numba.carray(i64_at(a[o]), (a[o + 1],))
    o += 2
    means = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2]))
    offsets = numba.carray(i64_at(a[o + 3]), (a[o + 4], a[o + 5]))
    o += 6
    pos = numba.carray(i32_at(a[o]), (a[o + 1], a[o + 2], a[o + 3], a[o + 4]))
    o += 5
    centred = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2]))
    i = next_chunk(data)
    while i < a[1]:
        k.gather_image(mark, cells, kept, means, offsets, pos, centred, i)
        i = next_chunk(data)


@numba.cfunc(_SIG, cache=True)
def _tables(data):
    a = numba.carray(int64_slots(data), _SLOTS)
    o = HEADER
    mark = numba.carray(u8_at(a[o]), (a[o + 1], a[o + 2], a[o + 3], a[o + 4]))
    o += 5
    pos = numba.carray(i32_at(a[o]), (a[o + 1], a[o + 2], a[o + 3], a[o + 4]))
    o += 5
    z = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2]))
    corners = a[o + 3] != 0
    o += 4
    offsets = numba.carray(i64_at(a[o]), (a[o + 1], a[o + 2]))
    counts = numba.carray(i64_at(a[o + 3]), (a[o + 4], a[o + 5]))
    o += 6
    nrm = numba.carray(f32_at(a[o]), (a[o + 1],))
    nxt = numba.carray(f32_at(a[o + 2]), (a[o + 3],))
    table = numba.carray(f32_at(a[o + 4]), (a[o + 5], a[o + 6]))
    i = next_chunk(data)
    while i < a[1]:
        k.tables_image(mark, pos, z, corners, offsets, counts, nrm, nxt, table, i)
        i = next_chunk(data)


@numba.cfunc(_SIG, cache=True)
def _pixels(data):
    a = numba.carray(int64_slots(data), _SLOTS)
    o = HEADER
    pred = numba.carray(i64_at(a[o]), (a[o + 1], a[o + 2], a[o + 3]))
    o += 4
    lut = numba.carray(i64_at(a[o]), (a[o + 1],))
    y0 = numba.carray(i64_at(a[o + 2]), (a[o + 3],))
    ry = numba.carray(f32_at(a[o + 4]), (a[o + 5], a[o + 6]))
    x0 = numba.carray(i64_at(a[o + 7]), (a[o + 8],))
    qx = numba.carray(f32_at(a[o + 9]), (a[o + 10], a[o + 11]))
    o += 12
    pos = numba.carray(i32_at(a[o]), (a[o + 1], a[o + 2], a[o + 3], a[o + 4]))
    o += 5
    table = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2]))
    out = numba.carray(f32_at(a[o + 3]), (a[o + 4], a[o + 5], a[o + 6]))
    i = next_chunk(data)
    while i < a[1]:
        k.pixel_image(pred, lut, y0, ry, x0, qx, pos, table, out, i)
        i = next_chunk(data)


@numba.cfunc(_SIG, cache=True)
def _image_mdsa(data):
    a = numba.carray(int64_slots(data), _SLOTS)
    o = HEADER
    scores = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2], a[o + 3], a[o + 4]))
    last = a[o + 5] != 0
    o += 6
    pred = numba.carray(i64_at(a[o]), (a[o + 1], a[o + 2], a[o + 3]))
    o += 4
    lut, y0, y1, x0, x1, mark, counts, span = _marking(a, o)
    o += 21
    cells = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2], a[o + 3], a[o + 4]))
    o += 5
    kept = numba.carray(i64_at(a[o]), (a[o + 1],))
    o += 2
    means = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2]))
    o += 3
    whiten = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2], a[o + 3]))
    o += 4
    ry = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2]))
    qx = numba.carray(f32_at(a[o + 3]), (a[o + 4], a[o + 5]))
    corners = a[o + 6] != 0
    blas = a[o + 7]
    o += 8
    pos = numba.carray(i32_at(a[o]), (a[o + 1], a[o + 2], a[o + 3], a[o + 4]))
    o += 5
    out = numba.carray(f32_at(a[o]), (a[o + 1], a[o + 2], a[o + 3]))
    i = next_chunk(data)
    while i < a[1]:
        k.image_mdsa(scores, last, pred, lut, y0, y1, x0, x1, mark, counts, span, cells, kept, means, whiten, ry,
                     qx, corners, blas, pos, out, i)
        i = next_chunk(data)


def argmax(y: np.ndarray, out: np.ndarray, channels_last: bool, threads: int | None = None) -> None:
    """out int64 [n, H, W] = argmax over the channels of y float32 ([n, H, W, C] when `channels_last`,
    else [n, C, H, W]; C-contiguous), as ``_fused_kernels.argmax_image``, one image per chunk."""
    run(_argmax, pack(y.shape[0], y, out, int(channels_last)), threads)


def mark(pred, lut, y0, y1, x0, x1, mark_, counts, span, threads: int | None = None) -> None:
    """``_fused_kernels.mark_image`` of every image (arguments as there; mark_ and counts zeroed)."""
    run(_mark, pack(pred.shape[0], pred, lut, y0, y1, x0, x1, mark_, counts, span), threads)


def argmax_mark(scores, channels_last: bool, pred, lut, y0, y1, x0, x1, mark_, counts, span,
                threads: int | None = None) -> None:
    """``_fused_kernels.argmax_mark_image`` of every image (arguments as there; mark_ and counts zeroed)."""
    run(_argmax_mark, pack(pred.shape[0], scores, int(channels_last), pred, lut, y0, y1, x0, x1, mark_, counts,
                           span), threads)


def gather(mark_, cells, kept, means, offsets, pos, centred, threads: int | None = None) -> None:
    """``_fused_kernels.gather_image`` of every image (arguments as there)."""
    run(_gather, pack(mark_.shape[1], mark_, cells, kept, means, offsets, pos, centred), threads)


def tables(mark_, pos, z, corners: bool, offsets, counts, nrm, nxt, table, threads: int | None = None) -> None:
    """``_fused_kernels.tables_image`` of every image (arguments as there)."""
    run(_tables, pack(mark_.shape[1], mark_, pos, z, int(corners), offsets, counts, nrm, nxt, table), threads)


def pixels(pred, lut, y0, ry, x0, qx, pos, table, out, threads: int | None = None) -> None:
    """``_fused_kernels.pixel_image`` of every image (arguments as there)."""
    run(_pixels, pack(pred.shape[0], pred, lut, y0, ry, x0, qx, pos, table, out), threads)


def image_mdsa(scores, channels_last: bool, pred, lut, y0, y1, x0, x1, mark_, counts, span, cells, kept, means,
               whiten, ry, qx, corners: bool, blas: int, pos, out, threads: int | None = None) -> None:
    """``_fused_kernels.image_mdsa`` of every image (arguments as there; mark_ and counts zeroed)."""
    run(_image_mdsa, pack(pred.shape[0], scores, int(channels_last), pred, lut, y0, y1, x0, x1, mark_, counts, span,
                          cells, kept, means, whiten, ry, qx, int(corners), blas, pos, out), threads)
