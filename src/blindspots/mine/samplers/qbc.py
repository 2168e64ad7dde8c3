"""Query by committee: the images on which the committee (the target and its competitors) disagrees most.

Query by committee (Seung, Opper & Sompolinsky 1992, "Query by committee", COLT) asks for the label of the
input whose committee members disagree most. Two disagreement measures of McCallum & Nigam 1998
("Employing EM and Pool-Based Active Learning for Text Classification", ICML) are computed per pixel and
averaged over the image's pixels:

- vote entropy: with V(c) the number of the M members whose argmax is class c,
  VE = -sum_c V(c)/M log(V(c)/M) (nats; 0 when all vote alike, log M at most);
- mean KL divergence to the consensus: with p_bar = mean_m p_m, KL = 1/M sum_m sum_c p_m,c log(p_m,c / p_bar,c).

The committee is the one MAD compares (the target and its competitors), so this is the plain-disagreement
baseline MAD's per-class, per-size rule must beat. The scan keeps only pairwise distances, not the per-pixel
votes, so the columns `al_qbcvote__{T}` and `al_qbckl__{T}` are computed from every member's probabilities
(`committee_disagreement`; `CommitteeColumns` for `blindspots.scan.extra.add_columns`).

Public API: `committee_disagreement(probas) -> (vote_entropy float64 [n], mean_kl float64 [n])`,
`QBCSampler(target=None, *, measure="vote")`, `.select(table, n=None, *, seed=0)` -> DataFrame
`id, score, reason` (score = the measure, highest first; ties keep table order).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from blindspots.mine.samplers.base import (
    Sampler, check_n, check_table, column, dumps_reason, ids_at, result_frame, top_n_indices, usable_mask,
)
from blindspots.scan import schema

# Lazy imports: torch (only to resize members of other sizes; the scan and mine start without it).

MEASURES = {"vote": "qbcvote", "kl": "qbckl"}
_EPS = 1e-12


def qbc_column(model: str, measure: str) -> str:
    """Column of the committee disagreement `measure` ("vote" or "kl") of the committee of target `model`."""
    return f"al_{MEASURES[measure]}{schema.SEP}{model}"


def committee_disagreement(probas: Sequence[np.ndarray] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-image mean of per-pixel vote entropy and mean KL to the consensus.

    probas: M >= 2 arrays float [n, C, H, W] (each member's class probabilities on the same n images,
        same C, H, W), or one array [M, n, C, H, W].
    Returns (vote_entropy float64 [n], mean_kl float64 [n]), both in nats.
    """
    p = np.asarray(probas, dtype=np.float64) if not isinstance(probas, np.ndarray) else probas.astype(np.float64)
    if p.ndim != 5 or p.shape[0] < 2:
        raise ValueError(f"probas: expected M >= 2 members' probabilities [M, n, C, H, W], got shape {p.shape}")
    m, c = p.shape[0], p.shape[2]
    votes = p.argmax(2)  # [M, n, H, W]
    counts = np.stack([(votes == k).sum(0) for k in range(c)], 1) / m  # [n, C, H, W] vote shares
    ve = -(np.where(counts > 0, counts * np.log(np.clip(counts, _EPS, None)), 0.0)).sum(1)
    mean = p.mean(0)  # consensus [n, C, H, W]
    kl = (np.where(p > 0, p * (np.log(np.clip(p, _EPS, None)) - np.log(np.clip(mean, _EPS, None))[None]), 0.0)
          ).sum(2).mean(0)  # [n, H, W]
    return ve.reshape(len(ve), -1).mean(1), np.clip(kl, 0.0, None).reshape(len(kl), -1).mean(1)


class CommitteeColumns:
    """`compute` for `blindspots.scan.extra.add_columns`: uint8 [n, H, W, 3] -> the two QBC columns float32 [n].

    members: segmenters with `predict_proba(images) -> float [n, C, H, W]` (the target first, then the
        competitors; outputs at another size are resized to the first member's).
    name: the target's column name T in `al_qbcvote__{T}`, `al_qbckl__{T}`.
    """

    def __init__(self, members: Sequence[Any], name: str) -> None:
        if len(members) < 2:
            raise ValueError(f"members: expected the target and at least one competitor, got {len(members)} model(s)")
        schema.check_model_name(name, "name")
        self.members, self.name = list(members), name

    def __call__(self, images: np.ndarray, ids: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        probas = [np.asarray(m.predict_proba(images), dtype=np.float32) for m in self.members]
        size = probas[0].shape[-2:]
        probas = [_resized(p, size) for p in probas]
        ve, kl = committee_disagreement(np.stack(probas))
        return {qbc_column(self.name, "vote"): ve.astype(np.float32), qbc_column(self.name, "kl"): kl.astype(np.float32)}


def _resized(p: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """float [n, C, h, w] -> [n, C, *size] (bilinear), as is when already that size."""
    if tuple(p.shape[-2:]) == tuple(size):
        return p
    import torch
    import torch.nn.functional as F

    return F.interpolate(torch.from_numpy(p), size=tuple(size), mode="bilinear", align_corners=False).numpy()


class QBCSampler(Sampler):
    """Highest mean per-pixel committee disagreement first.

    target: the target's name T of the `al_qbc*__{T}` columns (None: the only one present).
    measure: "vote" (vote entropy, the default) or "kl" (mean KL divergence to the consensus).
    """

    def __init__(self, target: str | None = None, *, measure: str = "vote") -> None:
        self.target = target
        self.measure = measure

    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        """Top-n usable rows by the measure. seed: accepted for the common interface (deterministic)."""
        if self.measure not in MEASURES:
            raise ValueError(f"measure: expected one of {list(MEASURES)}, got {self.measure!r}")
        check_table(table, [])
        n = check_n(n)
        head = f"al_{MEASURES[self.measure]}{schema.SEP}"
        found = [str(c)[len(head):] for c in table.columns if str(c).startswith(head)]
        target = self.target
        if target is None and len(found) == 1:
            target = found[0]
        if target is None or target not in found:
            raise ValueError(f"target: expected a model with a `{head}{{T}}` column {found}, got {target!r}; add "
                             "them with blindspots.mine.samplers.qbc.CommitteeColumns (the target and its competitors)")
        values = column(table, qbc_column(target, self.measure))
        cand = np.flatnonzero(usable_mask(table))
        top = top_n_indices(values, len(cand) if n is None else n, cand)
        reasons = [dumps_reason({"strategy": "qbc", "target": target, "measure": self.measure,
                                 "value": round(float(v), 6)}) for v in values[top]]
        return result_frame(ids_at(table, top), values[top], reasons)
