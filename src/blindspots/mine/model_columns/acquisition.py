"""Per-image active-learning scores that need the model itself, computed once per pool as scan columns.

The scan keeps each model's mean entropy and max-probability, enough for entropy and least-confidence
sampling. Margin, BALD and core-set need more: the two best class probabilities per pixel, several
stochastic forward passes with dropout on, and a feature vector per image. `acquisition_columns`
makes the `compute` of `blindspots.scan.extra.add_columns` that gives, for model M:

- `al_margin__{M}`: mean over pixels of p_(1) - p_(2) (best minus second-best class probability),
- `al_bald__{M}`: mean over pixels of the BALD mutual information H[mean_t p_t] - mean_t H[p_t] (nats)
  over `mc_passes` forward passes with dropout kept on (MC dropout),
- `al_feat__{M}__{j}`, j < D: the global-average-pooled input of the model's classifier layer (the
  penultimate features core-set sampling compares),
- `al_badge__{M}__{j}`, j < K * D: BADGE's gradient embedding (`blindspots.mine.model_columns.badge_embedding`: the
  classifier layer's weight gradient of the pixel cross-entropy with the model's own hard prediction);
  only when asked for (not in the default kinds: K x D columns per model).

`add_acquisition_columns(scan_dir, pool, segmenter, name)` writes them as the part
`extra/al_{kinds}__{M}/` of a finished scan (resumable like every extra part); `read_score_table`
joins them, so `MarginSampler`, `BALDSampler`, `PowerBALDSampler`, `CoreSetSampler` and `BADGESampler` read
them like any other column.

MC dropout on a model without dropout layers: `dropout=None` (default) refuses with a ValueError naming
the argument; `dropout=p` puts `torch.nn.functional.dropout2d(p)` on the input of the classifier layer
during the MC passes only (the weights are not changed). That is a departure from Gal et al. 2017, whose
networks were trained with the dropout they sample from; it is said in the column's reason.
"""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from blindspots.mine.model_columns.badge_embedding import check_head, gradient_embedding
from blindspots.mine.model_columns.head_output import post_head as _post_head, to_proba as _to_proba
from blindspots.mine.model_columns.names import (
    DEFAULT_KINDS, KINDS, badge_column, bald_column, feature_column, margin_column, part_name,
)
from blindspots.scan import schema
from blindspots.scan.extra import add_columns, claim_part
from blindspots.scan.fingerprint import model_fingerprint

MC_PASSES = 20  # Gal, Islam & Ghahramani 2017 draw T = 20 dropout samples per acquisition
_DROPOUT = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d, torch.nn.AlphaDropout)


def pixel_margin(proba: torch.Tensor) -> torch.Tensor:
    """proba float [n, C, H, W] -> mean over pixels of best minus second-best probability, float [n]."""
    if proba.shape[1] < 2:
        raise ValueError(f"proba: expected at least 2 classes for a margin, got shape {tuple(proba.shape)}")
    top2 = proba.topk(2, dim=1).values
    return (top2[:, 0] - top2[:, 1]).flatten(1).mean(1)


def pixel_entropy(proba: torch.Tensor) -> torch.Tensor:
    """proba float [n, C, H, W] -> per-pixel entropy float [n, H, W] (nats; 0 log 0 = 0)."""
    return -(proba * torch.log(proba.clamp_min(1e-12))).sum(1)


def check_dropout(module: torch.nn.Module, dropout: float | None) -> list[torch.nn.Module]:
    """The module's dropout layers; a ValueError when there are none and `dropout` is None."""
    layers = [m for m in module.modules() if isinstance(m, _DROPOUT)]
    if dropout is None and not layers:
        raise ValueError(
            "dropout: expected a model with dropout layers for MC-dropout BALD (Gal et al. 2017 sample the "
            "dropout the network was trained with), got a model without any; pass dropout=p (e.g. 0.25) to "
            "apply dropout to the input of its classifier layer during the MC passes only, or use another "
            "strategy (margin, entropy, coreset)")
    if dropout is not None and not (isinstance(dropout, (int, float)) and 0.0 < float(dropout) < 1.0):
        raise ValueError(f"dropout: expected None or a probability in (0, 1), got {dropout!r}")
    return layers


class AcquisitionColumns:
    """`compute` for `add_columns`: uint8 [n, H, W, 3] -> {column: float32 [n]}.

    segmenter: a `TorchSegmenter` (any model kind for "margin" alone: `predict_proba` is enough).
    name: the model name M in the column names (the scan's column name of that model).
    kinds: any of "margin", "bald", "features", "badge" (default: the first three).
    mc_passes: T, stochastic passes for BALD (default 20, Gal et al. 2017).
    dropout: None (use the model's own dropout layers; refuse if it has none) or p (dropout2d on the
        classifier layer's input during the MC passes; the model's own dropout layers stay off then).
    layer: feature layer (`name`, `name@input`; None: the classifier layer's input).
    seed: the MC passes of a batch are seeded by (seed, crc32 of the batch's pixels), so a resumed or
        re-run pass gives the same columns.
    """

    def __init__(self, segmenter: Any, name: str, *, kinds: Sequence[str] = DEFAULT_KINDS,
                 mc_passes: int = MC_PASSES, dropout: float | None = None, layer: str | None = None,
                 seed: int = 0) -> None:
        bad = [k for k in kinds if k not in KINDS]
        if bad or not kinds:
            raise ValueError(f"kinds: expected a non-empty subset of {list(KINDS)}, got {list(kinds)}")
        if isinstance(mc_passes, bool) or not isinstance(mc_passes, (int, np.integer)) or mc_passes < 2:
            raise ValueError(f"mc_passes: expected an int >= 2, got {mc_passes!r}")
        schema.check_model_name(name, "name")
        self.segmenter, self.name, self.kinds = segmenter, name, tuple(kinds)
        self.mc_passes, self.dropout, self.seed = int(mc_passes), dropout, int(seed)
        needs_torch = {"bald", "features", "badge"} & set(self.kinds)
        module = getattr(segmenter, "module", None)
        if needs_torch and not isinstance(module, torch.nn.Module):
            raise ValueError(f"segmenter: expected a model wrapping a torch nn.Module for {sorted(needs_torch)} "
                             f"(MC dropout, features, gradients), got {type(segmenter).__name__}")
        if "bald" in self.kinds:
            self._dropout_layers = check_dropout(module, dropout)
        self.layer = None
        if needs_torch:
            self.layer = layer or segmenter.default_feature_layer()
            segmenter.check_feature_layer(self.layer)
        if "badge" in self.kinds:  # refuse a head BADGE cannot use before any pass over the pool
            check_head(segmenter._layer_target(self.layer)[0], self.layer)

    def __call__(self, images: np.ndarray, ids: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        if self.layer is not None:
            feats, logits = self.segmenter.forward_features(images, self.layer)
            proba = _to_proba(self.segmenter, logits, images.shape[1:3])
            if "features" in self.kinds:
                pooled = feats.flatten(2).mean(2) if feats.ndim == 4 else feats.reshape(len(images), -1)
                for j in range(pooled.shape[1]):
                    out[feature_column(self.name, j)] = pooled[:, j].cpu().numpy().astype(np.float32)
            if "badge" in self.kinds:
                g = gradient_embedding(self.segmenter, images, self.layer, features=(feats, logits))
                out.update({badge_column(self.name, j): g[:, j] for j in range(g.shape[1])})
        else:
            proba = torch.from_numpy(np.ascontiguousarray(self.segmenter.predict_proba(images)))
        if "margin" in self.kinds:
            out[margin_column(self.name)] = pixel_margin(proba.float()).cpu().numpy().astype(np.float32)
        if "bald" in self.kinds:
            out[bald_column(self.name)] = self.bald(images).astype(np.float32)
        return out

    @torch.no_grad()
    def mc_probabilities(self, images: np.ndarray) -> torch.Tensor:
        """float [T, n, C, H, W]: the T stochastic softmax outputs (dropout on, BatchNorm in eval mode)."""
        seg, module = self.segmenter, self.segmenter.module
        gen_seed = zlib.crc32(np.ascontiguousarray(images).tobytes()) ^ (self.seed * 0x9E3779B1 & 0xFFFFFFFF)
        hook = None
        if self.dropout is not None:  # dropout on the classifier layer's input, MC passes only
            target, _ = seg._layer_target(seg.default_feature_layer())
            p = float(self.dropout)
            fast = self._head_only(images, target, p, gen_seed)
            if fast is not None:
                return fast
            hook = target.register_forward_pre_hook(lambda _m, inp: (_drop(inp[0], p), *inp[1:]))
        else:
            for m in self._dropout_layers:
                m.train()
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(gen_seed)
                out = [_to_proba(seg, seg.forward_tensor(images).float(), images.shape[1:3])
                       for _ in range(self.mc_passes)]
        finally:
            if hook is not None:
                hook.remove()
            module.eval()
        return torch.stack(out)

    @torch.no_grad()
    def _head_only(self, images: np.ndarray, head: torch.nn.Module, p: float, gen_seed: int) -> torch.Tensor | None:
        """The MC passes of dropout on the classifier layer's input, running only that layer T times.

        Everything before it is deterministic (eval mode), so one forward gives its input; this holds when
        the model's output is the layer's output as is, cropped or resized (checked on this batch), and
        gives the same numbers as T full passes (the same dropout masks are drawn in the same order).
        None when the output is made otherwise (then T full passes run).
        """
        seg = self.segmenter
        feats, y = seg.forward_features(images, seg.default_feature_layer())
        post = _post_head(head(feats).float(), y)
        if post is None:
            return None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(gen_seed)
            out = [_to_proba(seg, post(head(_drop(feats, p)).float()), images.shape[1:3])
                   for _ in range(self.mc_passes)]
        return torch.stack(out)

    def bald(self, images: np.ndarray) -> np.ndarray:
        """float64 [n]: mean over pixels of H[mean_t p_t] - mean_t H[p_t] (Houlsby et al. 2011, Eq. 3)."""
        p = self.mc_probabilities(images).double()
        mi = pixel_entropy(p.mean(0)) - torch.stack([pixel_entropy(pt) for pt in p]).mean(0)
        return mi.clamp_min(0).flatten(1).mean(1).numpy()


def _drop(x: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout kept on: whole channels for feature maps [n, D, h, w] (dropout2d), units otherwise."""
    return F.dropout2d(x, p, training=True) if x.ndim == 4 else F.dropout(x, p, training=True)


def add_acquisition_columns(scan_dir: str | Path, pool: Any, segmenter: Any, name: str, *,
                            kinds: Sequence[str] = DEFAULT_KINDS, mc_passes: int = MC_PASSES, dropout: float | None = None,
                            layer: str | None = None, seed: int = 0, batch_size: int = 16,
                            progress: bool = True) -> list[str]:
    """Add the acquisition columns of `segmenter` (named `name`) to a finished scan; returns their names.

    pool: the `ImagePool` that was scanned. Resumable (a shard already written is kept).
    """
    compute = AcquisitionColumns(segmenter, name, kinds=kinds, mc_passes=mc_passes, dropout=dropout, layer=layer,
                                 seed=seed)
    part = part_name(name, compute.kinds)
    _claim_part(Path(scan_dir) / "extra" / part, compute, segmenter)
    return add_columns(scan_dir, pool, part, compute, batch_size=batch_size, progress=progress)


def _claim_part(folder: Path, compute: AcquisitionColumns, segmenter: Any) -> None:
    """Record in `folder/acquisition.json` what fills the part (model fingerprint and settings); other MC
    passes, dropout or another model under the same name are a ValueError (`scan.extra.claim_part`)."""
    settings = {"model": model_fingerprint(segmenter), "kinds": list(compute.kinds), "layer": compute.layer,
                "seed": compute.seed, **({"mc_passes": compute.mc_passes, "dropout": compute.dropout}
                                         if "bald" in compute.kinds else {})}
    claim_part(folder, settings, "acquisition.json", "name")
