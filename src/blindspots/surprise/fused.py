"""Per-pixel MDSA fused into a segmentation forward pass, without building the [d, H, W] trace layer.

A pixel's trace is a bilinear mix of (at most) four low-resolution feature vectors with weights that
sum to 1, so its whitened trace is the same mix of the four *whitened* low-resolution vectors:
    z(p) = sum_k w_k(p) z_k,   z_k = W_c^T (f_k - mu_c),
and MDSA(p)^2 = ||z(p)||^2 = sum_k sum_l w_k w_l (z_k . z_l). The dot products between neighbouring
low-resolution cells (self, right, down, diagonal, anti-diagonal) are computed once per class at the
feature resolution; every output pixel then costs O(1), independent of d. Exact up to float32 rounding,
for bilinear (either align_corners) and nearest interpolation; other modes fall back to upsampling the
whitened map.
"""
from __future__ import annotations

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


def _neighbour_dots(z: torch.Tensor) -> dict[str, torch.Tensor]:
    """z: float32 [k, h0, w0, d'] -> dot-product tables [k, h0+1, w0+1] on the edge-replicated grid."""
    zp = torch.cat([z, z[:, -1:]], dim=1)
    zp = torch.cat([zp, zp[:, :, -1:]], dim=2)  # [k, h0+1, w0+1, d']
    k, hp, wp, _ = zp.shape
    out = {name: torch.zeros(k, hp, wp) for name in ("n", "h", "v", "dg", "ad")}
    out["n"] = (zp * zp).sum(-1)
    out["h"][:, :, :-1] = (zp[:, :, :-1] * zp[:, :, 1:]).sum(-1)
    out["v"][:, :-1] = (zp[:, :-1] * zp[:, 1:]).sum(-1)
    out["dg"][:, :-1, :-1] = (zp[:, :-1, :-1] * zp[:, 1:, 1:]).sum(-1)
    out["ad"][:, :-1, :-1] = (zp[:, :-1, 1:] * zp[:, 1:, :-1]).sum(-1)
    return out


def fused_mdsa_map(estimator: MDSA, features: torch.Tensor, pred: np.ndarray | torch.Tensor, *,
                   mode: str = "bilinear", align_corners: bool = False) -> np.ndarray:
    """Per-pixel MDSA float32 [n, H, W] under each pixel's predicted class.

    features: float32 [n, d, h0, w0] low-resolution features (all d, as at fit); pred: int [n, H, W]
    argmax maps at output resolution. mode / align_corners: the interpolation that maps features to
    output pixels ("bilinear" or "nearest"). NaN where the predicted class has no model.
    """
    if mode not in ("bilinear", "nearest"):
        raise ValueError(f"mode: expected 'bilinear' or 'nearest' for the fused path, got {mode!r}")
    pred_t = torch.as_tensor(np.asarray(pred)).long()
    n, h, w = pred_t.shape
    h0, w0 = features.shape[-2:]
    y0, ly = _axis(h, h0, mode, align_corners)
    x0, lx = _axis(w, w0, mode, align_corners)
    wp = w0 + 1
    base = (y0[:, None] * wp + x0[None, :]).reshape(-1)            # flat cell index [H*W]
    a = {"00": ((1 - ly)[:, None] * (1 - lx)[None, :]).reshape(-1), "01": ((1 - ly)[:, None] * lx[None, :]).reshape(-1),
         "10": (ly[:, None] * (1 - lx)[None, :]).reshape(-1), "11": (ly[:, None] * lx[None, :]).reshape(-1)}
    f = features.index_select(1, torch.from_numpy(estimator.kept_features_)).permute(0, 2, 3, 1)
    x1 = torch.clamp(x0 + 1, max=w0 - 1)
    y1 = torch.clamp(y0 + 1, max=h0 - 1)
    out = torch.full((n * h * w,), float("nan"))
    flat_pred = pred_t.reshape(-1)
    pix_all = torch.arange(h * w).repeat(n)
    img_all = torch.arange(n).repeat_interleave(h * w)
    cells = (h0 + 1) * wp
    for cls in torch.unique(flat_pred).tolist():
        if cls not in estimator.classes_:
            continue
        sel = torch.nonzero(flat_pred == cls).flatten()
        pix, img = pix_all[sel], img_all[sel]
        # whiten only the low-resolution cells some pixel of this class reads (usually a small share)
        need = torch.zeros(n, h0, w0, dtype=torch.bool)
        py, px = pix // w, pix % w
        for yy in (y0[py], y1[py]):
            for xx in (x0[px], x1[px]):
                need[img, yy, xx] = True
        mu, wt = estimator.whitening(int(cls))
        z = torch.zeros(n, h0, w0, wt.shape[1])
        z[need] = (f[need] - torch.from_numpy(mu).float()) @ torch.from_numpy(wt)
        t = {name: tab.reshape(-1) for name, tab in _neighbour_dots(z).items()}
        c = img * cells + base[pix]
        w00, w01, w10, w11 = a["00"][pix], a["01"][pix], a["10"][pix], a["11"][pix]
        nt, ht, vt, dt, at = t["n"], t["h"], t["v"], t["dg"], t["ad"]
        sq = (w00 * w00 * nt[c] + w01 * w01 * nt[c + 1] + w10 * w10 * nt[c + wp] + w11 * w11 * nt[c + wp + 1]
              + 2 * (w00 * w01 * ht[c] + w10 * w11 * ht[c + wp] + w00 * w10 * vt[c] + w01 * w11 * vt[c + 1]
                     + w00 * w11 * dt[c] + w01 * w10 * at[c]))
        out[sel] = torch.sqrt(torch.clamp(sq, min=0.0))
    return out.reshape(n, h, w).numpy()
