"""Per-pixel MDSA fused into a segmentation forward pass, without building the [d, H, W] trace layer.

A pixel's trace is a bilinear mix of (at most) four low-resolution feature vectors with weights that
sum to 1 and factor into a row part and a column part, w_jk = a_j(y) b_k(x), so its whitened trace is
the same mix of the four *whitened* low-resolution vectors:
    z(p) = sum_jk a_j b_k z_jk,   z_jk = W_c^T (f_jk - mu_c),
and MDSA(p)^2 = ||z(p)||^2 = sum_r R_r(y) sum_q Q_q(x) T[r, q] with R = (a0^2, 2 a0 a1, a1^2),
Q = (b0^2, 2 b0 b1, b1^2) and a 3x3 table T of dot products between the four corner cells
(rows: top pair, top-bottom cross pairs, bottom pair).

Cost, for K classes predicted in a batch: one pass over the output pixels marks the (class, cell) pairs
some pixel reads; each class's marked cells are whitened by one matmul (O(d^2) per cell, about
(1 + boundary share) x the grid in total, not K x); a second pass computes every pixel in O(1) from a
table per (class, base cell), O(d) — compiled with numba (``_fused_kernels``). Exact up to float32
rounding, for bilinear (either align_corners) and nearest interpolation; other modes fall back to
upsampling the whitened map (``image.mdsa_map``).

Where it runs: images are independent, so every pass takes one image at a time, spread over numba's
``prange`` threads (``_fused_prange``, as many as torch uses); the whitening is one torch.mm per class.
From the model's scores (``fused_argmax_mdsa_map``, what ``surprise_heatmaps`` uses) the argmax is taken
in the marking pass.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from blindspots.surprise.estimators import MDSA

# Lazy imports: numba (its JIT kernels are compiled or loaded by their first call).

#: Interpolation modes of the fused path (others: ``image.mdsa_map`` upsamples the whitened map).
FUSED_MODES = ("bilinear", "nearest")
#: Rows of marked cells are numbered in int32 (``pos``): at most this many (class, image, cell) triples per call.
ROW_MAX = 2**31 - 1


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



@functools.lru_cache(maxsize=64)
def axis_sources(out: int, inp: int, mode: str, align_corners: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Along one axis (read-only, cached): first source index int64 [out], second source index int64 [out]
    (the first where only one is read: nearest, or the clamped border) and weights float32 [out, 3]."""
    i0, lam = _axis(out, inp, mode, align_corners)
    i1 = i0 if mode == "nearest" else torch.clamp(i0 + 1, max=inp - 1)
    arrays = (i0.numpy(), i1.numpy(), _weights(lam).numpy())
    for a in arrays:
        a.flags.writeable = False
    return arrays


def fused_mdsa_map(estimator: MDSA, features: torch.Tensor, pred: np.ndarray | torch.Tensor, *,
                   mode: str = "bilinear", align_corners: bool = False, num_classes: int | None = None
                   ) -> np.ndarray:
    """Per-pixel MDSA float32 [n, H, W] under each pixel's predicted class.

    features: float32 [n, d, h0, w0] low-resolution features (all d, as at fit); pred: int [n, H, W]
    argmax maps at output resolution (numpy or torch). mode / align_corners: the interpolation that maps
    features to output pixels ("bilinear" or "nearest"). num_classes: optional bound C on the ids in pred
    (the model's classes). NaN where the predicted class has no model.
    """
    passes = _passes()

    pred_t = pred.cpu() if isinstance(pred, torch.Tensor) else torch.from_numpy(np.asarray(pred))
    if pred_t.ndim != 3 or pred_t.is_floating_point() or pred_t.is_complex() or pred_t.numel() == 0:
        raise ValueError(f"pred: expected int argmax maps [n, H, W], got {pred_t.dtype} {tuple(pred_t.shape)}")
    pred_np = pred_t.long().contiguous().numpy()
    grid = _Grid(estimator, features, pred_np.shape, mode, align_corners, num_classes)
    passes.mark(pred_np, grid.lut, grid.y0, grid.y1, grid.x0, grid.x1, grid.mark, grid.counts, grid.span)
    return grid.finish(passes, estimator, features, pred_np, np.empty(pred_np.shape, dtype=np.float32))


def fused_argmax_mdsa_map(estimator: MDSA, features: torch.Tensor, scores: torch.Tensor, *,
                          mode: str = "bilinear", align_corners: bool = False, num_classes: int | None = None,
                          out: np.ndarray | None = None, pred_out: np.ndarray | None = None
                          ) -> tuple[np.ndarray, np.ndarray]:
    """(per-pixel MDSA float32 [n, H, W], argmax classes int64 [n, H, W]) from the model's scores float32
    [n, C, H, W] (logits or probabilities, CPU; channels-last strides are read as they are), with the
    argmax taken in the marking pass (``_fused_kernels.argmax_mark_image``): equal to ``argmax_classes``
    then ``fused_mdsa_map``, one pass over the output pixels less.

    out / pred_out: optional C-contiguous float32 / int64 [n, H, W] arrays to write into (e.g. slices of
    the caller's result), else new ones. Other arguments as in ``fused_mdsa_map``.
    """
    passes = _passes()

    if scores.ndim != 4 or scores.dtype != torch.float32 or scores.device.type != "cpu" or scores.shape[1] < 1:
        raise ValueError(f"scores: expected CPU float32 [n, C, H, W], got {scores.dtype} {tuple(scores.shape)} on "
                         f"{scores.device}")
    n, c, h, w = scores.shape
    shape = (n, h, w)
    out = _check_out(out, shape, np.float32, "out")
    pred_np = _check_out(pred_out, shape, np.int64, "pred_out")
    grid = _Grid(estimator, features, shape, mode, align_corners, num_classes)
    last = scores.detach().permute(0, 2, 3, 1)
    channels_last = last.is_contiguous()  # as some models return: read a row at a time, no copy
    y = last if channels_last else scores.detach().contiguous()
    passes.argmax_mark(y.numpy(), channels_last, pred_np, grid.lut, grid.y0, grid.y1, grid.x0, grid.x1, grid.mark,
                       grid.counts, grid.span)
    return grid.finish(passes, estimator, features, pred_np, out), pred_np


def _passes():  # noqa: ANN202 - the module of per-image passes
    """The per-image passes over numba's prange (imported, and the kernels compiled or loaded from numba's
    cache, on first use)."""
    from blindspots.surprise import _fused_prange
    return _fused_prange


def _check_out(out: np.ndarray | None, shape: tuple[int, ...], dtype: type, name: str) -> np.ndarray:
    if out is None:
        return np.empty(shape, dtype=dtype)
    if out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"{name}: expected a writeable C-contiguous {np.dtype(dtype)} array {shape}, got "
                         f"{out.dtype} {out.shape}")
    return out


class _Grid:
    """The output grid's sources along each axis and the empty marks of one fused call (validated)."""

    def __init__(self, estimator: MDSA, features: torch.Tensor, shape: tuple[int, int, int], mode: str,
                 align_corners: bool, num_classes: int | None) -> None:
        if mode not in FUSED_MODES:
            raise ValueError(f"mode: expected 'bilinear' or 'nearest' for the fused path, got {mode!r}")
        n, h, w = shape
        if features.ndim != 4 or features.shape[0] != n or features.shape[1] != estimator.n_features_in_:
            raise ValueError(f"features: expected float32 [{n}, {estimator.n_features_in_}, h0, w0] (the "
                             f"estimator's d), got shape {tuple(features.shape)}")
        classes = estimator.classes_
        self.slots = max(num_classes or 0, int(classes.max()) + 1)
        self.num_classes = num_classes
        self.mode = mode
        h0, w0 = int(features.shape[-2]), int(features.shape[-1])
        if classes.size * n * h0 * w0 > ROW_MAX:  # the rows of marked cells are numbered in int32 (pos)
            raise ValueError(f"features: expected at most {ROW_MAX} (class, image, cell) triples per call, got "
                             f"{classes.size} classes x {n} images x {h0}x{w0} cells: score fewer images per call")
        self.y0, self.y1, self.ry = axis_sources(h, h0, mode, align_corners)
        self.x0, self.x1, self.qx = axis_sources(w, w0, mode, align_corners)
        # slot s = class classes_[s]; ids past the modelled ones: no model
        self.lut = np.full(self.slots, -1, dtype=np.int64)
        self.lut[classes] = np.arange(classes.size)
        # one slot per modelled class, marked or not: the ids are checked in the marking pass, no count pass
        self.mark = np.zeros((classes.size, n, h0, w0), dtype=np.uint8)
        self.counts = np.zeros((classes.size, n), dtype=np.int64)  # marked cells per (slot, image)
        self.span = np.empty((n, 2), dtype=np.int64)  # smallest and largest id per image

    def check_ids(self) -> None:
        """ValueError naming pred unless the ids the marking pass saw (span) are valid."""
        lo, hi = int(self.span[:, 0].min()), int(self.span[:, 1].max())
        if lo < 0 and self.num_classes is None:
            raise ValueError(f"pred: expected non-negative class ids, got minimum {lo}")
        if self.num_classes is not None and (lo < 0 or hi >= self.slots):
            raise ValueError(f"pred: expected class ids in [0, {self.slots}), got ids from {lo} to {hi}")

    def finish(self, passes, estimator: MDSA, features: torch.Tensor, pred: np.ndarray, out: np.ndarray
               ) -> np.ndarray:
        """Check the ids the marking pass saw, whiten the marked cells, build their tables and fill out."""
        self.check_ids()
        pos, z, offsets = _whiten_marked(passes, estimator, features, self.mark, self.counts)
        if z.shape[0] == 0:  # no pixel of a modelled class
            out[:] = np.nan
            return out
        m = z.shape[0]
        nrm, nxt, table = np.empty(m, np.float32), np.empty(m, np.float32), np.empty((m, 9), np.float32)
        passes.tables(self.mark, pos, z, self.mode == "bilinear", offsets, self.counts, nrm, nxt, table)
        passes.pixels(pred, self.lut, self.y0, self.ry, self.x0, self.qx, pos, table, out)
        return out


#: Whitened rows are padded to a multiple of this many float32 columns (zeros), so the dot products in
#: ``_fused_kernels.tables_image`` run in whole vector registers (16 float32 = one AVX-512 register) without a
#: scalar tail.
PAD_COLUMNS = 16


def _whiten_marked(passes, estimator: MDSA, features: torch.Tensor, mark: np.ndarray, counts: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Whitened features of the marked cells: (pos int32 [K, n, h0, w0] row of each marked cell in z,
    z float32 [m, D] slot-major, then image, then row-major cells, D = d' rounded up to PAD_COLUMNS with
    zero columns, offsets int64 [K, n] first row of each (slot, image)); mark uint8 [K, n, h0, w0] with
    slot s = class estimator.classes_[s], counts int64 [K, n] its marked cells per (slot, image).

    The variance filter is folded into the whitening: all d channels are centred (dropped ones by 0) and
    multiplied by a [d, D] matrix whose rows of dropped channels are zero, so no per-channel gather."""
    f = features.detach().float().cpu()
    means, whiten = estimator.padded_whitening(PAD_COLUMNS)
    d, pad = whiten.shape[1:]
    ends = np.cumsum(counts.ravel())  # rows: slot-major, then image
    m = int(ends[-1]) if ends.size else 0
    offsets = (ends - counts.ravel()).reshape(counts.shape)
    pos = np.empty(mark.shape, dtype=np.int32)
    centred = np.empty((m, d), dtype=np.float32)
    cells = f.permute(0, 2, 3, 1).contiguous().numpy()  # [n, h0, w0, d]: no copy for channels-last layers
    # centre first (in float32, as the traces), so the whitening matmul adds no cancellation
    passes.gather(mark, cells, means, offsets, pos, centred)
    z = torch.empty(m, pad)
    src = torch.from_numpy(centred)
    bounds = ends.reshape(counts.shape)[:, -1].tolist()
    start = 0
    for s, stop in enumerate(bounds):  # one matmul per class present, over the cells it reads
        if start < stop:
            torch.mm(src[start:stop], whiten[s], out=z[start:stop])
        start = stop
    return pos, z.numpy(), offsets
