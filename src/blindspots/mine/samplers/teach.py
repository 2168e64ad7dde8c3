"""Which rated candidates to label: failures the model is unsure of and has not seen ("rate broadly, label
narrowly").

The paper labels the n4 lowest-MOS images of M. The worst-rated images are not always the ones that teach
the model most: several may show the same failure, near images already labelled, or a failure the model is
sure of and cannot learn from a few masks. `teach_order` picks S from the rated M greedily by

    score_t(x) = w_fail * fail(x) + w_unsure * unsure(x) + w_new * new_t(x),

- fail(x): the percentile rank of -MOS among the rated candidates (1 = the worst rated);
- unsure(x): the percentile rank of the target's uncertainty (e.g. 1 - mean pixel margin, or entropy);
- new_t(x): the distance of x's features to the nearest labelled image or earlier pick of S, divided by the
  largest such distance among the remaining candidates (1 = the least like anything labelled; 0 for all
  when no features are given), recomputed after every pick as in k-center greedy (Sener & Savarese 2018,
  arXiv:1708.00489), so one failure is not labelled twice.

`RULES` holds the two rules a loop or benchmark may name: "teach" (this one) and "lowest_mos" (the paper's).

Public API: `teach_order(mos, n, *, uncertainty=None, features=None, centers=None, weights=WEIGHTS)
-> (order int64 [n], parts float64 [n, 3])`; `lowest_mos_order(mos, n) -> int64 [n]`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from blindspots.mine.samplers.coreset import distance_to_centers

RULES = ("teach", "lowest_mos")
WEIGHTS = (1.0, 1.0, 1.0)
"""(w_fail, w_unsure, w_new): equal weights, set before any benchmark run; kept by the held-out check of
`benchmarks/portfolio_defaults.py` (seeds 100-102, not the reported 0-4) against (1, 1, 0) and (0, 1, 1)."""


def _rank(v: np.ndarray) -> np.ndarray:
    """Percentile rank in (0, 1] (ties averaged); 0.5 for every entry when v is all NaN or constant."""
    s = pd.Series(v)
    if s.notna().sum() == 0 or s.nunique() <= 1:
        return np.full(len(v), 0.5)
    return s.rank(pct=True, method="average").fillna(0.0).to_numpy(np.float64)


def lowest_mos_order(mos: np.ndarray, n: int) -> np.ndarray:
    """int64 [min(n, M)]: the paper's rule, the n lowest MOS first (ties: the earlier candidate)."""
    mos = np.asarray(mos, dtype=np.float64)
    return np.lexsort((np.arange(len(mos)), mos))[:max(0, int(n))].astype(np.int64)


def teach_order(mos: np.ndarray, n: int, *, uncertainty: np.ndarray | None = None, features: np.ndarray | None = None,
                centers: np.ndarray | None = None, weights: tuple[float, float, float] = WEIGHTS
                ) -> tuple[np.ndarray, np.ndarray]:
    """S from rated candidates by failure, uncertainty and novelty (see the module docstring).

    mos: float [M] mean opinion score per candidate (lower = rated worse).
    uncertainty: float [M] the target's uncertainty per candidate (higher = less sure), or None (term 0.5).
    features: float [M, D] per candidate (e.g. the target's pooled features), or None (no novelty term).
    centers: float [L, D] features of the images labelled so far (S0 and earlier rounds), or None.
    weights: (w_fail, w_unsure, w_new), each >= 0.
    Returns (order int64 [min(n, M)] candidate positions in pick order, parts float64 [len(order), 3]: each
    pick's fail, unsure and new terms when it was picked).
    """
    mos = np.asarray(mos, dtype=np.float64)
    m = len(mos)
    if mos.ndim != 1:
        raise ValueError(f"mos: expected float [M], got shape {mos.shape}")
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (3,) or (w < 0).any() or not np.isfinite(w).all():
        raise ValueError(f"weights: expected three numbers >= 0 (fail, unsure, new), got {weights!r}")
    fail = _rank(-mos)
    if uncertainty is None:
        unsure = np.full(m, 0.5)
    else:
        u = np.asarray(uncertainty, dtype=np.float64)
        if u.shape != (m,):
            raise ValueError(f"uncertainty: expected float [{m}] (one per candidate), got shape {u.shape}")
        unsure = _rank(u)
    dist = np.zeros(m)
    x = None
    if features is not None:
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or len(x) != m:
            raise ValueError(f"features: expected float [{m}, D] (one row per candidate), got shape {x.shape}")
        dist = distance_to_centers(x, centers)
    k = min(max(0, int(n)), m)
    left = np.ones(m, dtype=bool)
    order, parts = np.empty(k, np.int64), np.empty((k, 3))
    for t in range(k):
        d = dist[left]
        finite = d[np.isfinite(d)]
        top = finite.max() if len(finite) else 0.0
        new = np.where(np.isinf(dist), 1.0, dist / top if top > 0 else 0.0) if x is not None else np.zeros(m)
        score = np.where(left, w[0] * fail + w[1] * unsure + w[2] * new, -np.inf)
        j = int(np.argmax(score))  # ties: the earlier candidate
        order[t], parts[t] = j, (fail[j], unsure[j], new[j])
        left[j] = False
        if x is not None:
            np.minimum(dist, np.sqrt(((x - x[j]) ** 2).sum(1)), out=dist)
    return order, parts
