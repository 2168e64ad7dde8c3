"""Per-pixel MDSA fused into a segmentation forward pass, without building the [d, H, W] trace layer.

A pixel's trace is a bilinear mix of (at most) four low-resolution feature vectors with weights that
sum to 1 and factor into a row part and a column part, w_jk = a_j(y) b_k(x), so its whitened trace is
the same mix of the four *whitened* low-resolution vectors:
    z(p) = sum_jk a_j b_k z_jk,   z_jk = W_c^T (f_jk - mu_c),
and MDSA(p)^2 = ||z(p)||^2 = sum_r R_r(y) sum_q Q_q(x) T[r, q] with R = (a0^2, 2 a0 a1, a1^2),
Q = (b0^2, 2 b0 b1, b1^2) and a 3x3 table T of dot products between the four corner cells
(rows: top pair, top-bottom cross pairs, bottom pair).

Cost: the tables are built once per (class, base cell) that some pixel of that class reads, at the
feature resolution (whitening matmul + row dot products; a class covering much of the grid is whitened
on the whole edge-padded grid, where neighbour dots are shifted slices, rarer classes gather their
cells). The column weights are folded into the tables per column offset inside a base cell, so every
output pixel costs O(1), independent of d: three table lookups and three multiply-adds, vectorised
over all pixels, images and classes at once (no per-class masks). Exact up to float32 rounding, for
bilinear (either align_corners) and nearest interpolation; other modes fall back to upsampling the
whitened map (``image.mdsa_map``).
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from blindspots.surprise.estimators import MDSA


def _axis(out: int, inp: int, mode: str, align_corners: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Source index i0 (int64 [out]) and weight of i0+1 (float32 [out]) along one axis, as F.interpolate."""
    dst = torch.arange(out, dtype=torch.float64)
    if mode == "nearest":
        i0 = torch.clamp(torch.floor(dst * (inp / out)).long(), max=inp - 1)
        return i0, torch.zeros(out, dtype=torch.float32)
    if align_corners:
        src = dst * ((inp - 1) / (out - 1)) if out > 1 else torch.zeros(out, dtype=torch.float64)
    else:
        src = torch.clamp((dst + 0.5) * (inp / out) - 0.5, min=0.0)
    i0 = torch.clamp(torch.floor(src).long(), max=inp - 1)
    lam = (src - i0).float()
    lam[i0 == inp - 1] = 0.0  # the clamped neighbour equals i0
    return i0, lam


def _weights(lam: torch.Tensor) -> torch.Tensor:
    """float32 [out, 3] (w0^2, 2 w0 w1, w1^2) of the two source weights (1 - lam, lam) along one axis."""
    w0 = 1.0 - lam
    return torch.stack([w0 * w0, 2.0 * w0 * lam, lam * lam], dim=1)


def fused_mdsa_map(estimator: MDSA, features: torch.Tensor, pred: np.ndarray | torch.Tensor, *,
                   mode: str = "bilinear", align_corners: bool = False, num_classes: int | None = None
                   ) -> np.ndarray:
    """Per-pixel MDSA float32 [n, H, W] under each pixel's predicted class.

    features: float32 [n, d, h0, w0] low-resolution features (all d, as at fit); pred: int [n, H, W]
    argmax maps at output resolution (numpy or torch). mode / align_corners: the interpolation that maps
    features to output pixels ("bilinear" or "nearest"). num_classes: optional bound C on the ids in pred
    (the model's classes; saves one pass over pred). NaN where the predicted class has no model.
    """
    if mode not in ("bilinear", "nearest"):
        raise ValueError(f"mode: expected 'bilinear' or 'nearest' for the fused path, got {mode!r}")
    pred_t = pred.cpu() if isinstance(pred, torch.Tensor) else torch.from_numpy(np.asarray(pred))
    if pred_t.ndim != 3 or pred_t.is_floating_point() or pred_t.is_complex() or pred_t.numel() == 0:
        raise ValueError(f"pred: expected int argmax maps [n, H, W], got {pred_t.dtype} {tuple(pred_t.shape)}")
    n, h, w = pred_t.shape
    if features.ndim != 4 or features.shape[0] != n:
        raise ValueError(f"features: expected float32 [{n}, d, h0, w0], got shape {tuple(features.shape)}")
    flat = pred_t.reshape(-1).long()
    if num_classes is None:
        lo, hi = (int(v) for v in torch.aminmax(flat))
        if lo < 0:
            raise ValueError(f"pred: expected non-negative class ids, got minimum {lo}")
        num_classes = hi + 1
    classes = estimator.classes_
    slots = max(num_classes, int(classes.max()) + 1)
    try:  # one pass: pixels per class (only classes in pred get a slot: array sizes ~ slots)
        counts = torch.bincount(flat, minlength=slots)
    except RuntimeError as err:  # negative ids
        raise ValueError(f"pred: expected class ids in [0, {slots}), got others ({err})") from None
    if counts.numel() > slots:
        raise ValueError(f"pred: expected class ids in [0, {slots}), got up to {counts.numel() - 1}")
    ids = np.intersect1d(np.flatnonzero(counts.numpy()), classes)  # slot i = class ids[i]
    if ids.size == 0:
        return np.full((n, h, w), np.nan, dtype=np.float32)
    # A class predicted on most pixels gets a whole-map pass: separable in rows and columns, no per-pixel keys.
    wide = [int(c) for c in ids if counts[int(c)] >= DENSE_PIXEL_SHARE * flat.numel()]
    if len(wide) == 1 and int(counts[wide[0]]) == flat.numel():  # one class everywhere
        return _class_map(estimator, features, wide[0], h, w, mode, align_corners).numpy()
    rest = np.setdiff1d(ids, wide)
    out = _keyed_map(estimator, features, flat, slots, rest, n, h, w, mode, align_corners) \
        if rest.size else torch.full((n, h, w), float("nan"))
    for cls in wide:
        out = torch.where(pred_t == cls, _class_map(estimator, features, cls, h, w, mode, align_corners), out)
    return out.numpy()


def _keyed_map(estimator: MDSA, features: torch.Tensor, flat: torch.Tensor, slots: int, ids: np.ndarray,
               n: int, h: int, w: int, mode: str, align_corners: bool) -> torch.Tensor:
    """MDSA float32 [n, H, W] of the pixels whose class is in `ids` (NaN elsewhere), through per-pixel keys
    into tables built only for the (class, base cell) pairs some pixel reads. flat: int64 [n*H*W] classes."""
    k = ids.size
    h0, w0 = int(features.shape[-2]), int(features.shape[-1])
    cells = h0 * w0
    nc = n * cells
    y0, ly = _axis(h, h0, mode, align_corners)
    x0, lx = _axis(w, w0, mode, align_corners)
    # key of a pixel: slot * nc + image * cells + base cell (y0 * w0 + x0); slot k = no model
    lut = torch.full((slots,), k * nc, dtype=torch.int64)
    lut[torch.from_numpy(ids)] = torch.arange(k) * nc
    offs = (torch.arange(n) * cells)[:, None] + (y0[:, None] * w0 + x0[None, :]).reshape(1, -1)
    key = lut.index_select(0, flat).view(n, -1).add_(offs).view(-1)  # int64 [n * H * W]
    mark = torch.zeros((k + 1) * nc, dtype=torch.bool)
    mark.index_fill_(0, key, True)
    mark[k * nc:] = False
    base = torch.nonzero(mark).flatten()  # (slot, image, base cell) some modelled pixel reads, sorted
    m = base.numel()
    table = _tables(estimator, features, ids, base, nc, h0, w0, corners=mode == "bilinear")
    if mode == "nearest":
        rowmap = torch.cumsum(mark, 0).sub_(1)
        rowmap[k * nc:] = m  # pixels without a model read the NaN row
        sq = torch.cat([table, torch.tensor([float("nan")])]).index_select(0, rowmap.index_select(0, key))
        return sq.view(n, h, w).clamp_(min=0.0).sqrt_()
    # fold the column weights into the tables per (slot, base cell, column offset j inside the run of output
    # columns sharing that base column): u[r, m, j] = sum_q Q_q(x) T[m, r, q], so a pixel reads 3 values, not 9
    start = torch.searchsorted(x0, torch.arange(w0))  # first output column of each base column
    jx = torch.arange(w) - start[x0]
    span = int(jx.max()) + 1
    cols = (start[:, None] + torch.arange(span)).clamp_(max=w - 1)  # [w0, span] output columns
    qx = _weights(lx).T[:, cols]  # [3, w0, span] column weights of each base column's output columns
    qm = qx.index_select(1, base % w0)  # [3, m, span]
    tt = table.permute(1, 2, 0)[..., None]  # [3 (r), 3 (q), m, 1]
    u = torch.empty(3, m + 1, span)
    u[:, m] = float("nan")  # the row of pixels without a model
    uv = u[:, :m]
    torch.mul(qm[0], tt[:, 0], out=uv)
    uv.addcmul_(qm[1], tt[:, 1]).addcmul_(qm[2], tt[:, 2])
    u = u.view(3, -1)
    rowmap = torch.cumsum(mark, 0).sub_(1).mul_(span)
    rowmap[k * nc:] = m * span
    row = rowmap.index_select(0, key).view(n * h, w).add_(jx).view(-1)
    rw = _weights(ly).T.contiguous()[:, :, None]  # [3, h, 1] row weights, broadcast over images and columns
    sq = u[0].index_select(0, row).view(n, h, w).mul_(rw[0])
    sq.addcmul_(u[1].index_select(0, row).view(n, h, w), rw[1])
    sq.addcmul_(u[2].index_select(0, row).view(n, h, w), rw[2])
    return sq.clamp_(min=0.0).sqrt_()


#: A class predicted on at least this share of a batch's pixels is scored on the whole map (one whitening of
#: the full grid, tables for every cell, then a row pass and a column pass) and its pixels picked out.
DENSE_PIXEL_SHARE = 0.5


def _class_map(estimator: MDSA, features: torch.Tensor, cls: int, h: int, w: int, mode: str,
               align_corners: bool) -> torch.Tensor:
    """MDSA float32 [n, H, W] of every output pixel under class `cls`: tables T [n, h0, w0, 3, 3] of all base
    cells, then sq(y, x) = sum_r R_r(y) sum_q Q_q(x) T[y0(y), x0(x), r, q] as a column then a row contraction."""
    corners = mode == "bilinear"
    fp, hp, wp = _padded_rows(estimator, features, corners)
    n, h0, w0 = features.shape[0], int(features.shape[-2]), int(features.shape[-1])
    mu, wt = estimator.whitening(int(cls))
    z = torch.mm(fp - torch.from_numpy(mu).float(), torch.from_numpy(wt)).numpy()  # centre first
    # Both contractions as matmuls with the (sparse, tiny) interpolation matrices: no [n, H, W, 3] gathers.
    r = 3 if corners else 1
    my = _spread(h, h0, mode, align_corners)  # [H, h0 * r]: row weights R_r(y)
    mx = _spread(w, w0, mode, align_corners)  # [W, w0 * r]: column weights Q_q(x)
    # table rows (image, base row a, r), columns (base column b, q) -> contract (b, q) with the columns
    t = torch.from_numpy(_full_tables(z, n, hp, wp, corners)).view(n * h0 * r, w0 * r)
    u = torch.mm(t, mx.T).view(n, h0 * r, w)  # [n, (a, r), W]
    sq = torch.matmul(my, u)  # [n, H, W]
    return sq.clamp_(min=0.0).sqrt_()


#: A class whose pixels read at least this share of the low-resolution cells is whitened on the whole
#: (edge-padded) grid, where neighbour dot products are shifted views; rarer classes gather their cells.
DENSE_SHARE = 0.4


def _tables(estimator: MDSA, features: torch.Tensor, ids: np.ndarray, base: torch.Tensor, nc: int,
            h0: int, w0: int, *, corners: bool) -> torch.Tensor:
    """Dot-product tables float32 [M, 3, 3] (or [M] squared norms when only the base cell is read).

    ids: int64 [K] class of each slot. base: int64 [M] sorted keys slot * nc + image * h0 * w0 + y0 * w0
    + x0. Rows of each key's 3x3 table: (|z00|^2, z00.z01, |z01|^2), (z00.z10, (z00.z11 + z01.z10) / 2,
    z01.z11), (|z10|^2, z10.z11, |z11|^2), z_jk the whitened feature of cell (y0 + j, x0 + k), clamped at
    the border (edge replication).
    """
    fp, hp, wp = _padded_rows(estimator, features, corners)
    keys = base.numpy()
    bounds = np.searchsorted(keys, np.arange(ids.size + 1) * nc)
    out = np.empty((keys.size, 3, 3) if corners else keys.size, dtype=np.float32)
    for i, cls in enumerate(ids.tolist()):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        if lo == hi:
            continue
        cell = keys[lo:hi] - i * nc
        img, yx = np.divmod(cell, h0 * w0)
        y, x = np.divmod(yx, w0)
        pidx = (img * hp + y) * wp + x  # base cell on the padded grid
        if not corners:
            quads = pidx[None]
        else:
            quads = np.stack([pidx, pidx + 1, pidx + wp, pidx + wp + 1])
        mu, wt = estimator.whitening(int(cls))
        mu_t, wt_t = torch.from_numpy(mu).float(), torch.from_numpy(wt)
        need = None
        if hi - lo < DENSE_SHARE * fp.shape[0]:  # the cells read are at least the base cells
            mk = np.zeros(fp.shape[0], dtype=bool)
            mk[quads] = True
            need = np.flatnonzero(mk)
        if need is None or need.size >= DENSE_SHARE * fp.shape[0]:
            z = torch.mm(fp - mu_t, wt_t).numpy()  # centre first: no cancellation after the matmul
            out[lo:hi] = _grid_tables(z, quads, corners)
        else:
            z = torch.mm(fp.index_select(0, torch.from_numpy(need)) - mu_t, wt_t).numpy()
            out[lo:hi] = _gathered_tables(z, np.searchsorted(need, quads), corners)
    return torch.from_numpy(out)


@functools.lru_cache(maxsize=64)
def _spread(out: int, size: int, mode: str, align_corners: bool) -> torch.Tensor:
    """Dense interpolation matrix float32 [out, size * r] along one axis (read-only, cached): entry
    (o, i0[o] * r + j) = weight j of output o — (w0^2, 2 w0 w1, w1^2) for bilinear (r = 3), 1 for nearest."""
    i0, lam = _axis(out, size, mode, align_corners)
    weights = _weights(lam) if mode == "bilinear" else torch.ones(out, 1)
    r = weights.shape[1]
    m = torch.zeros(out, size * r)
    m.scatter_(1, i0[:, None] * r + torch.arange(r)[None, :], weights.float())
    return m


def _padded_rows(estimator: MDSA, features: torch.Tensor, corners: bool) -> tuple[torch.Tensor, int, int]:
    """Kept features as rows float32 [n * hp * wp, d'] of the grid, edge-padded by one row and column for
    bilinear (the clamped neighbour of a border cell is the cell itself), with hp, wp."""
    kept = estimator.kept_features_
    f = features.detach().float().cpu()
    if kept.size != f.shape[1]:
        f = f.index_select(1, torch.from_numpy(kept))
    fp = torch.nn.functional.pad(f, (0, 1, 0, 1), mode="replicate") if corners else f
    hp, wp = int(fp.shape[-2]), int(fp.shape[-1])
    return fp.permute(0, 2, 3, 1).reshape(fp.shape[0] * hp * wp, -1), hp, wp


def _rowdot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("...k,...k->...", a, b)  # numpy's row dots: about 2x torch's on one core


def _neighbour_dots(z: np.ndarray, wp: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per cell of a row-major grid z float32 [cells, d'] with rows of wp cells: (z.right, z.down,
    (z.diagonal + right.down) / 2), float32 [cells] each. Contiguous slices; entries that wrap across a grid
    row or image are never read (base cells are never in the padding row / column)."""
    size = z.shape[0]

    def shifted(step: int) -> np.ndarray:  # dot of every cell with the cell `step` further on
        out = np.zeros(size, dtype=np.float32)
        out[:size - step] = _rowdot(z[:size - step], z[step:])
        return out

    anti = np.zeros(size, dtype=np.float32)  # z(y, x + 1) . z(y + 1, x)
    anti[:size - wp] = _rowdot(z[1:size - wp + 1], z[wp:])
    cross = shifted(wp + 1)
    cross += anti
    cross *= 0.5
    return shifted(1), shifted(wp), cross


def _grid_tables(z: np.ndarray, quads: np.ndarray, corners: bool) -> np.ndarray:
    """Tables from whitened features on the padded grid z float32 [n * hp * wp, d'] (row-major cells);
    quads int [4 or 1, m] flat indices of the corner cells 00, 01, 10, 11."""
    nrm = _rowdot(z, z)
    if not corners:
        return nrm[quads[0]]
    right, down, cross = _neighbour_dots(z, int(quads[2, 0] - quads[0, 0]))
    q00, q01, q10 = quads[0], quads[1], quads[2]
    t = np.empty((quads.shape[1], 3, 3), dtype=np.float32)
    t[:, 0, 0], t[:, 0, 1], t[:, 0, 2] = nrm[q00], right[q00], nrm[q01]
    t[:, 1, 0], t[:, 1, 1], t[:, 1, 2] = down[q00], cross[q00], down[q01]
    t[:, 2, 0], t[:, 2, 1], t[:, 2, 2] = nrm[q10], right[q10], nrm[quads[3]]
    return t


def _full_tables(z: np.ndarray, n: int, hp: int, wp: int, corners: bool) -> np.ndarray:
    """Tables of every base cell, laid out [n, h0, 3 (r), w0, 3 (q)] (bilinear) or [n, h0, w0] (nearest),
    from whitened rows z float32 [n * hp * wp, d'] of the (padded) grid; the same entries as `_grid_tables`
    with all base cells, read as slices of the neighbour-dot grids instead of gathers."""
    nrm = _rowdot(z, z).reshape(n, hp, wp)
    if not corners:
        return nrm
    right, down, cross = (g.reshape(n, hp, wp) for g in _neighbour_dots(z, wp))
    t = np.empty((n, hp - 1, 3, wp - 1, 3), dtype=np.float32)
    t[:, :, 0, :, 0], t[:, :, 0, :, 1], t[:, :, 0, :, 2] = nrm[:, :-1, :-1], right[:, :-1, :-1], nrm[:, :-1, 1:]
    t[:, :, 1, :, 0], t[:, :, 1, :, 1], t[:, :, 1, :, 2] = down[:, :-1, :-1], cross[:, :-1, :-1], down[:, :-1, 1:]
    t[:, :, 2, :, 0], t[:, :, 2, :, 1], t[:, :, 2, :, 2] = nrm[:, 1:, :-1], right[:, 1:, :-1], nrm[:, 1:, 1:]
    return t


def _gathered_tables(z: np.ndarray, pos: np.ndarray, corners: bool) -> np.ndarray:
    """Tables from whitened rows z float32 [u, d']; pos int [4 or 1, m] row of each corner in z."""
    nrm = _rowdot(z, z)
    if not corners:
        return nrm[pos[0]]
    zq = z[pos.T.reshape(-1)].reshape(pos.shape[1], 4, -1)  # corners 00, 01, 10, 11 of each key

    def dot(a: int, b: int) -> np.ndarray:
        return _rowdot(zq[:, a], zq[:, b])

    t = np.empty((pos.shape[1], 3, 3), dtype=np.float32)
    t[:, 0, 0], t[:, 0, 1], t[:, 0, 2] = nrm[pos[0]], dot(0, 1), nrm[pos[1]]
    t[:, 1, 0], t[:, 1, 1], t[:, 1, 2] = dot(0, 2), 0.5 * (dot(0, 3) + dot(1, 2)), dot(1, 3)
    t[:, 2, 0], t[:, 2, 1], t[:, 2, 2] = nrm[pos[2]], dot(2, 3), nrm[pos[3]]
    return t
