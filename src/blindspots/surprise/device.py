"""Per-pixel MDSA on the device that ran the forward (a GPU): the fused heatmap of ``surprise.fused`` in
torch ops, so the feature maps never travel to host memory (only the [n, H, W] map does).

Same mathematics as the CPU path (see ``surprise.fused``): a pixel's trace is a bilinear mix of at most
four low-resolution feature vectors with separable weights, so its squared MDSA is
sum_rq R_r(y) Q_q(x) T[r, q], where T is a 3x3 table of dot products between the four whitened corner
cells of its base cell. Per class present in the batch: the cells its pixels read are whitened by one
matmul (the class's padded whitening, dropped features zero), the tables of its base cells are built
in chunks of CHUNK_CELLS, and each of its pixels reads one table row. All classes go at once: one sort
of the (class, base cell) keys of the batch's pixels, one of the (class, cell) pairs they read, one
matmul per class present; no pass over the pixels per class, whose cost would grow with the number
of classes. Equal to the CPU maps to float32
rounding (the sums run in another order); NaN where the predicted class has no model.
"""
from __future__ import annotations

import torch

from blindspots.surprise.estimators import MDSA
from blindspots.surprise.fused import FUSED_MODES, PAD_COLUMNS, axis_sources

CHUNK_CELLS = 1 << 16  # (class, base cell) rows per table chunk: 4 x 65536 x D float32 corners (D = 768: 0.8 GB)


def _axis(out: int, inp: int, mode: str, align_corners: bool, device: torch.device
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(first source int64 [out], second source int64 [out], weights float32 [out, 3]) on `device`."""
    return tuple(torch.tensor(a, device=device) for a in axis_sources(out, inp, mode, align_corners))  # type: ignore


def _whitening(estimator: MDSA, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The estimator's padded (means [K, d], whitening [K, d, D]) on `device`, copied there once per fit
    (kept beside the padded matrices, which a refit or load drops)."""
    means, whiten = estimator.padded_whitening(PAD_COLUMNS)
    cache = estimator.__dict__["_padded"]
    key = ("device", str(device))
    if key not in cache:
        cache[key] = (torch.tensor(means, device=device), whiten.to(device))
    return cache[key]


def device_mdsa_map(estimator: MDSA, features: torch.Tensor, pred: torch.Tensor, *, mode: str = "bilinear",
                    align_corners: bool = False, chunk_cells: int = CHUNK_CELLS) -> torch.Tensor:
    """Per-pixel MDSA float32 [n, H, W] on the features' device.

    features: float32 [n, d, h0, w0] (all d features, as at fit); pred: int [n, H, W] argmax maps on
    the same device; mode / align_corners: the interpolation that maps features to output pixels
    ("bilinear" or "nearest"). Class ids without a model (or outside the modelled range) give NaN."""
    if mode not in FUSED_MODES:
        raise ValueError(f"mode: expected one of {FUSED_MODES} for the device map, got {mode!r}")
    if features.ndim != 4 or features.shape[1] != estimator.n_features_in_:
        raise ValueError(f"features: expected float32 [n, {estimator.n_features_in_}, h0, w0] (the estimator's d), "
                         f"got shape {tuple(features.shape)}")
    if pred.ndim != 3 or pred.shape[0] != features.shape[0] or pred.is_floating_point():
        raise ValueError(f"pred: expected int argmax maps [{features.shape[0]}, H, W], got {pred.dtype} "
                         f"{tuple(pred.shape)}")
    dev = features.device
    n, d, h0, w0 = features.shape
    h, w = pred.shape[1:]
    y0, _, ry = _axis(h, h0, mode, align_corners, dev)
    x0, _, qx = _axis(w, w0, mode, align_corners, dev)
    means, whiten = _whitening(estimator, dev)
    classes = torch.from_numpy(estimator.classes_).to(dev)
    slots = int(estimator.classes_.max()) + 1
    lut = torch.full((slots,), -1, dtype=torch.long, device=dev)
    lut[classes] = torch.arange(classes.numel(), device=dev)
    pred = pred.long()
    slot = torch.where((pred >= 0) & (pred < slots), lut[pred.clamp(0, slots - 1)], -1)
    cells = features.detach().float().permute(0, 2, 3, 1).reshape(n * h0 * w0, d)
    ncell = n * h0 * w0
    base = (torch.arange(n, device=dev).view(n, 1, 1) * h0 + y0.view(1, h, 1)) * w0 + x0.view(1, 1, w)
    out = torch.full((n, h, w), float("nan"), dtype=torch.float32, device=dev)
    modelled = slot >= 0
    img, yy, xx = torch.nonzero(modelled, as_tuple=True)  # every modelled pixel, all classes at once
    if img.numel() == 0:
        return out
    # one (class, base cell) row per distinct pair any pixel reads, class-major: one sort for the batch
    rows, row_of_pixel = torch.unique(slot[img, yy, xx] * ncell + base[img, yy, xx], return_inverse=True)
    table = _tables(cells, rows // ncell, rows % ncell, means, whiten, h0, w0, mode == "bilinear", chunk_cells)
    t = table[row_of_pixel].view(-1, 3, 3)  # [k, 3, 3] of each pixel's (class, base cell)
    sq = torch.einsum("kr,krq,kq->k", ry[yy], t, qx[xx])
    out[img, yy, xx] = torch.sqrt(torch.clamp(sq, min=0.0))  # rounding below 0 clipped, as on the CPU
    return out


def _tables(cells: torch.Tensor, slot: torch.Tensor, base: torch.Tensor, means: torch.Tensor, whiten: torch.Tensor,
            h0: int, w0: int, corners: bool, chunk: int) -> torch.Tensor:
    """float32 [m, 9] tables (row-major 3x3, as ``_fused_kernels.tables_image``) of m (class slot, base cell)
    rows sorted by slot: each row's four corner cells (flat into n x h0 x w0) whitened under its class
    (means [K, d], whiten [K, d, D]), each (class, cell) pair once, by one matmul per class present."""
    m = base.numel()
    img, rem = base // (h0 * w0), base % (h0 * w0)
    a, c = rem // w0, rem % w0
    a1 = torch.clamp(a + 1, max=h0 - 1) if corners else a
    c1 = torch.clamp(c + 1, max=w0 - 1) if corners else c
    ncell = cells.shape[0]
    corner = torch.stack([(img * h0 + a) * w0 + c, (img * h0 + a) * w0 + c1,
                          (img * h0 + a1) * w0 + c, (img * h0 + a1) * w0 + c1])  # [4, m]: z00, z01, z10, z11
    pairs, which = torch.unique(slot * ncell + corner, return_inverse=True)  # (class, cell), class-major
    pair_slot, pair_cell = pairs // ncell, pairs % ncell
    z = torch.empty((pairs.numel(), whiten.shape[2]), dtype=torch.float32, device=cells.device)
    present, counts = torch.unique_consecutive(pair_slot, return_counts=True)
    start = 0
    for s, k in zip(present.tolist(), counts.tolist()):  # one host read; one matmul per class present
        # centred first, in float32 as the CPU path, then whitened
        torch.mm(cells[pair_cell[start:start + k]] - means[s], whiten[s], out=z[start:start + k])
        start += k
    out = torch.empty((m, 9), dtype=torch.float32, device=cells.device)
    for s in range(0, m, chunk):
        corners = z[which[:, s:s + chunk].T]  # [k, 4, D]: z00, z01, z10, z11 of each row
        g = torch.bmm(corners, corners.transpose(1, 2))  # [k, 4, 4] dot products: the corners read once
        out[s:s + chunk] = torch.stack([
            g[:, 0, 0], g[:, 0, 1], g[:, 1, 1],
            g[:, 0, 2], 0.5 * (g[:, 0, 3] + g[:, 1, 2]), g[:, 1, 3],
            g[:, 2, 2], g[:, 2, 3], g[:, 3, 3]], dim=1)
    return out


def on_device(features: torch.Tensor, estimator: object, mode: str) -> bool:
    """True when `surprise_heatmaps` takes the device path: MDSA, a fused mode, features on an accelerator."""
    return isinstance(estimator, MDSA) and mode in FUSED_MODES and features.device.type != "cpu"

