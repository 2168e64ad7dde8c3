"""Compiled loops of per-pixel surprise (numba): the argmax and the fused MDSA map's passes over output
pixels and over marked cells, one image per call (``_fused_prange`` spreads the images over numba's
``prange``).

Kept apart so that numba is imported (and these kernels compiled, then cached on disk) only when a
heatmap is first computed. The passes over output pixels (``argmax_image``, ``mark_image``, both in one
pass in ``argmax_mark_image``, and ``pixel_image``) do O(1) work per pixel (per class for the argmax);
the O(d) work is done once per marked (class slot, cell): centring in ``gather_image``, whitening by
torch.mm per class (in ``fused``), dot products in ``tables_image``. Images are independent, so any
split over threads gives the one-thread results bit for bit.
"""
from __future__ import annotations

import numba
import numpy as np

# reassociate and contract float32 sums so the dot products vectorise; NaN / inf semantics are kept
_FAST = {"nsz", "reassoc", "contract", "arcp"}


@numba.njit(inline="always")
def _argmax_row(y: np.ndarray, out: np.ndarray, i: int, a: int, t: np.ndarray, best: np.ndarray, idx: np.ndarray,
                last: bool) -> None:
    """out[i, a] int64 [W] = argmax over C of row a of image i, as torch.argmax: the first maximum on ties,
    the first NaN where there is one. y float32 [n, C, H, W], or [n, H, W, C] when `last` (channels-last
    maps: the row's [W, C] block is transposed into the L1 scratch t [C, W] first, so the compare runs over
    pixels in vector lanes without a copy of the whole map); best float32 [W] and idx int32 [W] scratch
    (branch-free selects on int32 lanes: measured 0.57 ms against 0.79 ms with int64 lanes and a branch,
    [8, 128, 128, 8] channels-last, one thread)."""
    if last:
        row = y[i, a]
        for k in range(row.shape[1]):  # strided reads, contiguous writes: vectorised (0.45 against 0.56 ms)
            tk = t[k]
            for b in range(row.shape[0]):
                tk[b] = row[b, k]
    else:
        for k in range(t.shape[0]):
            t[k] = y[i, k, a]
    for b in range(best.size):
        best[b] = t[0, b]
        idx[b] = 0
    for k in range(1, t.shape[0]):
        tk = t[k]
        kk = np.int32(k)
        for b in range(best.size):
            v, m = tk[b], best[b]
            up = (v > m) | ((v != v) & (m == m))  # a NaN wins over numbers, the first NaN stays
            best[b] = v if up else m
            idx[b] = kk if up else idx[b]
    o = out[i, a]
    for b in range(best.size):
        o[b] = idx[b]


@numba.njit(cache=True, nogil=True)
def argmax_image(y: np.ndarray, out: np.ndarray, last: bool, i: int) -> None:
    """out[i] int64 [H, W] = argmax over the channels of image i of y float32 [n, C, H, W], or [n, H, W, C]
    when `last` (C-contiguous), a row at a time (``_argmax_row``)."""
    c, h, w = (y.shape[3], y.shape[1], y.shape[2]) if last else (y.shape[1], y.shape[2], y.shape[3])
    t = np.empty((c, w), dtype=y.dtype)
    best, idx = np.empty(w, dtype=y.dtype), np.empty(w, dtype=np.int32)
    for a in range(h):
        _argmax_row(y, out, i, a, t, best, idx, last)


@numba.njit(inline="always")
def _mark_row(pred: np.ndarray, lut: np.ndarray, y0: np.ndarray, y1: np.ndarray, x0: np.ndarray,
              x1: np.ndarray, mark: np.ndarray, counts: np.ndarray, i: int, y: int, lo: int, hi: int
              ) -> tuple[int, int]:
    """``mark_image`` of output row y of image i; returns (lo, hi) widened by the row's ids."""
    a, b = y0[y], y1[y]
    # an upsampled row reads the same source rows as the one above it (3 of 4 rows at 4x): a pixel of
    # the same class as the pixel above marks nothing new (measured 0.27 -> 0.18 ms, 8 x 128 x 128)
    same_rows = y > 0 and y0[y - 1] == a and y1[y - 1] == b
    row, above = pred[i, y], pred[i, max(y - 1, 0)]
    last_s, last_c = -1, -1
    for x in range(pred.shape[2]):
        v = row[x]
        lo = min(lo, v)
        hi = max(hi, v)
        if same_rows and above[x] == v:
            continue
        s = lut[v] if 0 <= v < lut.size else -1
        c = x0[x]
        if s < 0 or (s == last_s and c == last_c):  # runs along a row mark the same cells
            continue
        last_s, last_c = s, c
        d = x1[x]
        m = mark[s, i]
        cnt = 0  # cells newly marked; checked one after the other, so coinciding cells count once
        if m[a, c] == 0:
            cnt += 1
        m[a, c] |= 3  # a base cell: its table is built
        if m[a, d] == 0:
            cnt += 1
        m[a, d] |= 1
        if m[b, c] == 0:
            cnt += 1
        m[b, c] |= 1
        if m[b, d] == 0:
            cnt += 1
        m[b, d] |= 1
        counts[s, i] += cnt
    return lo, hi


@numba.njit(cache=True, nogil=True)
def mark_image(pred: np.ndarray, lut: np.ndarray, y0: np.ndarray, y1: np.ndarray, x0: np.ndarray,
               x1: np.ndarray, mark: np.ndarray, counts: np.ndarray, span: np.ndarray, i: int) -> None:
    """Mark every low-resolution cell (a, b) of image i that some output pixel of class slot s reads: bit 1 of
    mark[s, i, a, b] when read, bit 2 when it is some pixel's base cell (the top-left one of those it reads).
    Counts the marked cells of (s, i) in counts[s, i] and writes image i's (smallest, largest) id in pred
    to span[i], so that the ids are checked in the same pass.

    pred int64 [n, H, W] (ids outside [0, lut.size): no model); lut int64 class id -> slot (-1: no model);
    y0 / y1 int64 [H] (x0 / x1 [W]) the two source rows (columns) of each output row (column), equal where
    only one is read; mark uint8 [K, n, h0, w0] and counts int64 [K, n] zeroed for image i; span int64 [n, 2]."""
    lo, hi = pred[i, 0, 0], pred[i, 0, 0]
    for y in range(pred.shape[1]):
        lo, hi = _mark_row(pred, lut, y0, y1, x0, x1, mark, counts, i, y, lo, hi)
    span[i, 0], span[i, 1] = lo, hi


@numba.njit(cache=True, nogil=True)
def argmax_mark_image(scores: np.ndarray, last: bool, pred: np.ndarray, lut: np.ndarray, y0: np.ndarray,
                      y1: np.ndarray, x0: np.ndarray, x1: np.ndarray, mark: np.ndarray, counts: np.ndarray,
                      span: np.ndarray, i: int) -> None:
    """``argmax_image`` of scores into pred, then ``mark_image`` of pred, a row at a time: each row of
    classes is marked while it is in L1, and pred is not read back from memory."""
    c, h, w = (scores.shape[3], scores.shape[1], scores.shape[2]) if last else scores.shape[1:]
    t = np.empty((c, w), dtype=scores.dtype)
    best, idx = np.empty(w, dtype=scores.dtype), np.empty(w, dtype=np.int32)
    lo, hi = np.int64(c), np.int64(-1)
    for y in range(h):
        _argmax_row(scores, pred, i, y, t, best, idx, last)
        lo, hi = _mark_row(pred, lut, y0, y1, x0, x1, mark, counts, i, y, lo, hi)
    span[i, 0], span[i, 1] = lo, hi


@numba.njit(cache=True, nogil=True)
def gather_image(mark: np.ndarray, cells: np.ndarray, means: np.ndarray, offsets: np.ndarray, pos: np.ndarray,
                 centred: np.ndarray, i: int) -> None:
    """Centred features of image i's marked cells, at their rows: slot-major, then image, then row-major.

    mark uint8 [K, n, h0, w0]; cells float32 [n, h0, w0, d] the features, channels last (C-contiguous);
    means float32 [K, d] per slot; offsets int64 [K, n] first row of (slot, image). Writes pos int32
    [K, n, h0, w0] (row of each marked cell; unmarked: unset) and rows of centred float32 [m, d]
    (cells[i, a, b] - means[s]). All d channels, contiguous: measured 0.21 ms against 0.45 ms for the
    46 kept of 64 by index (10,952 rows, one thread); the whitening's zero rows drop the others.
    """
    k, n, h0, w0 = mark.shape
    for s in range(k):
        r = offsets[s, i]
        mu = means[s]
        for a in range(h0):
            for b in range(w0):
                if mark[s, i, a, b] == 0:
                    continue
                pos[s, i, a, b] = r
                src, dst = cells[i, a, b], centred[r]
                for j in range(src.size):
                    dst[j] = src[j] - mu[j]
                r += 1


@numba.njit(inline="always", fastmath=_FAST)
def _dot(u: np.ndarray, v: np.ndarray) -> np.float32:
    acc = np.float32(0.0)
    for k in range(u.size):
        acc += u[k] * v[k]
    return acc


@numba.njit(inline="always", fastmath=_FAST)
def _dot2(u: np.ndarray, v: np.ndarray, w: np.ndarray) -> tuple[np.float32, np.float32]:
    """(u.v, u.w) in one pass over u."""
    a0 = a1 = np.float32(0.0)
    for k in range(u.size):
        a0 += u[k] * v[k]
        a1 += u[k] * w[k]
    return a0, a1


@numba.njit(inline="always", fastmath=_FAST)
def _dot4(z00: np.ndarray, z01: np.ndarray, z10: np.ndarray, z11: np.ndarray
          ) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """(z00.z10, z01.z11, z00.z11, z01.z10): a base cell's cross products, each row read once."""
    a0 = a1 = a2 = a3 = np.float32(0.0)
    for k in range(z00.size):
        a0 += z00[k] * z10[k]
        a1 += z01[k] * z11[k]
        a2 += z00[k] * z11[k]
        a3 += z01[k] * z10[k]
    return a0, a1, a2, a3


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def tables_image(mark: np.ndarray, pos: np.ndarray, z: np.ndarray, corners: bool, offsets: np.ndarray,
                 counts: np.ndarray, nrm: np.ndarray, nxt: np.ndarray, table: np.ndarray, i: int) -> None:
    """3x3 dot-product tables of image i's base cells into table float32 [m, 9].

    mark uint8 [K, n, h0, w0] (``mark_image``); pos int32 [K, n, h0, w0] row in z of each marked cell
    (slot-major, row-major within a slot, so a marked right neighbour is the next row); z float32 [m, D]
    whitened features (zero padding columns allowed); offsets / counts int64 [K, n] first row and rows of
    (slot, image); nrm / nxt float32 [m] scratch (|z[p]|^2, z[p] . z[p + 1]), written for image i's rows.
    Row p of the table (p = the base cell's row) holds, row-major, (|z00|^2, z00.z01, |z01|^2),
    (z00.z10, (z00.z11 + z01.z10) / 2, z01.z11), (|z10|^2, z10.z11, |z11|^2) with z_jk the cell (a + j,
    b + k), clamped at the border (and j = k = 0 when not `corners`: nearest). Rows of cells that are no
    pixel's base cell are left unset; ``pixel_image`` never reads them.
    """
    m = z.shape[0]
    k, n, h0, w0 = mark.shape
    for s in range(k):
        for p in range(offsets[s, i], offsets[s, i] + counts[s, i]):
            if p + 1 < m:  # z[p] read once for its norm and its product with the right neighbour (when marked)
                nrm[p], nxt[p] = _dot2(z[p], z[p], z[p + 1])
            else:
                nrm[p], nxt[p] = _dot(z[p], z[p]), np.float32(0.0)
        for a in range(h0):
            a1 = min(a + 1, h0 - 1) if corners else a
            for b in range(w0):
                if mark[s, i, a, b] & 2 == 0:  # not a base cell (its neighbours are marked when it is)
                    continue
                b1 = min(b + 1, w0 - 1) if corners else b
                p00, p01, p10, p11 = pos[s, i, a, b], pos[s, i, a, b1], pos[s, i, a1, b], pos[s, i, a1, b1]
                t = table[p00]
                t[0], t[2], t[6], t[8] = nrm[p00], nrm[p01], nrm[p10], nrm[p11]
                if p01 == p00:  # one column read (border or nearest): z01 = z00, z11 = z10
                    t[1], t[7] = nrm[p00], nrm[p10]
                else:
                    t[1], t[7] = nxt[p00], nxt[p10]
                if p10 == p00:  # one row read: z10 = z00, z11 = z01
                    t[3], t[4], t[5] = nrm[p00], t[1], nrm[p01]
                else:
                    t[3], t[5], d0, d1 = _dot4(z[p00], z[p01], z[p10], z[p11])
                    t[4] = np.float32(0.5) * (d0 + d1)


@numba.njit(cache=True, nogil=True, fastmath=_FAST)
def pixel_image(pred: np.ndarray, lut: np.ndarray, y0: np.ndarray, ry: np.ndarray, x0: np.ndarray,
                qx: np.ndarray, pos: np.ndarray, table: np.ndarray, out: np.ndarray, i: int) -> None:
    """out[i] float32 [H, W] = MDSA of every output pixel of image i under its class slot (NaN: no model).

    pred int64 [n, H, W]; ry float32 [H, 3] / qx float32 [W, 3]: (w0^2, 2 w0 w1, w1^2) of the two source
    rows / columns; a pixel's squared MDSA is R(y)^T T Q(x) with T its base cell's table (``tables_image``).
    Along a row, pixels that share a base cell and class reuse the row-weighted table (held in registers).
    """
    n, h, w = pred.shape
    nan, zero = np.float32(np.nan), np.float32(0.0)
    squares = np.empty(w, dtype=np.float32)  # a row's squared MDSA, then one vectorised sqrt pass
    for y in range(h):
        a = y0[y]
        r0, r1, r2 = ry[y, 0], ry[y, 1], ry[y, 2]
        last = -1
        u0 = u1 = u2 = zero
        row = pred[i, y]
        for x in range(w):
            v = row[x]
            s = lut[v] if 0 <= v < lut.size else -1
            if s < 0:
                squares[x] = nan
                continue
            p = pos[s, i, a, x0[x]]
            if p != last:
                last = p
                t = table[p]
                u0 = r0 * t[0] + r1 * t[3] + r2 * t[6]
                u1 = r0 * t[1] + r1 * t[4] + r2 * t[7]
                u2 = r0 * t[2] + r1 * t[5] + r2 * t[8]
            squares[x] = qx[x, 0] * u0 + qx[x, 1] * u1 + qx[x, 2] * u2
        o = out[i, y]
        for x in range(w):  # rounding below 0 clipped; NaN (no model) kept
            q = squares[x]
            o[x] = np.sqrt(zero if q < zero else q)
