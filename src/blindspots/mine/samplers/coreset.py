"""Core-set selection: k-center greedy on the model's pooled penultimate features.

Sener & Savarese 2018, "Active Learning for Convolutional Neural Networks: A Core-Set Approach"
(ICLR, arXiv:1708.00489), Algorithm 1 (k-Center-Greedy): with s the labelled points, repeatedly add
u = argmax_{i not in s} min_{j in s} ||x_i - x_j||_2 until the budget is spent, so the picks cover the
feature space. The features are the model's activations before its classifier (the paper takes the
final fully connected layer's input; for a segmenter, the classifier layer's input averaged over the
image, `al_feat__{M}__{j}` of `blindspots.mine.model_columns.acquisition`). The paper's robust MIP refinement is not
run (its k-Center-Greedy is the baseline most follow-up work compares with).

Labelled points: `labelled` (ids of the table already labelled, e.g. earlier rounds' S) and `centers`
(float [L, D] features of labelled images outside the pool, e.g. the training set S0). With neither,
the first pick is drawn uniformly with `seed` (Algorithm 1 needs an initial set).

Public API: `labelled_features(table, ids, target=None) -> float [L, D]`, `k_center_greedy(x, n, centers=None, *, first=None) -> (picks int64 [n], dist float64 [n])`,
`CoreSetSampler(target=None, *, labelled=None, centers=None)`, `.select(table, n=None, *, seed=0)` ->
DataFrame `id, score, reason`, score = the distance to the nearest labelled or earlier pick when picked.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from blindspots.mine.model_columns.names import feature_columns, model_with_column
from blindspots.mine.samplers.base import Sampler, check_n, check_table, dumps_reason, ids_at, result_frame, usable_mask

_CHUNK = 4096  # rows of the distance matrix to centres computed at once


def min_distance(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """float64 [N]: Euclidean distance of each row of x [N, D] to its nearest row of centers [L, D]."""
    out = np.full(len(x), np.inf)
    for s in range(0, len(centers), _CHUNK):
        c = centers[s:s + _CHUNK]
        d2 = (x * x).sum(1)[:, None] - 2.0 * x @ c.T + (c * c).sum(1)[None, :]
        out = np.minimum(out, np.sqrt(np.clip(d2, 0.0, None)).min(1))
    return out


def distance_to_centers(x: np.ndarray, centers: np.ndarray | None) -> np.ndarray:
    """float64 [N]: each row of x [N, D]'s distance to its nearest centre [L, D] (inf for all when there
    are none). ValueError naming `centers` when their width is not D."""
    if centers is None or not len(centers):
        return np.full(len(x), np.inf)
    c = np.asarray(centers, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] != x.shape[1]:
        raise ValueError(f"centers: expected features float [L, {x.shape[1]}], got shape {c.shape}")
    return min_distance(x, c)


def labelled_features(table: pd.DataFrame, ids: Sequence[str], target: str | None = None) -> np.ndarray:
    """float64 [L, D]: the `al_feat__{M}__*` rows of the labelled `ids` found in `table` (usable, finite), the
    centres core-set needs when the labelled rows are taken out of the table it picks from."""
    target = model_with_column(table, "feat", target)
    cols = feature_columns(table.columns, target)
    rows = table[table["id"].astype(str).isin({str(i) for i in ids})]
    x = rows[cols].to_numpy(dtype=np.float64, na_value=np.nan)
    return x[usable_mask(rows) & np.isfinite(x).all(1)]


def k_center_greedy(x: np.ndarray, n: int, centers: np.ndarray | None = None, *,
                    first: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sener & Savarese's k-Center-Greedy.

    x: float [N, D] candidate points; n: how many to pick (at most N).
    centers: float [L, D] already labelled points (None or L = 0: the first pick is `first`).
    first: row of x picked first when there are no centres (required then).
    Returns (picks int64 [min(n, N)], dist float64 [min(n, N)]): picks in order, and each pick's
    distance to its nearest centre or earlier pick at the time it was picked (inf for a first pick
    without centres). Ties take the lowest row.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"x: expected features float [N, D], got shape {x.shape}")
    n = min(int(n), len(x))
    min_d = distance_to_centers(x, centers)
    if n and first is None and np.isinf(min_d).all():
        raise ValueError("first: expected the row to start from when there are no centres, got None")
    picks, dists = np.empty(n, np.int64), np.empty(n)
    for t in range(n):
        u = int(first) if (t == 0 and np.isinf(min_d).all() and first is not None) else int(np.argmax(min_d))
        picks[t], dists[t] = u, min_d[u]
        d_u = np.sqrt(((x - x[u]) ** 2).sum(1))
        np.minimum(min_d, d_u, out=min_d)
        min_d[u] = -np.inf  # never again
    return picks, dists


class CoreSetSampler(Sampler):
    """k-Center-Greedy over `al_feat__{M}__*` columns.

    target: model name M of the feature columns (None: the only model with them).
    labelled: ids in the table that are labelled already (centres; never picked).
    centers: float [L, D] features of labelled images outside the table (e.g. S0), same layer and model.
    """

    def __init__(self, target: str | None = None, *, labelled: Sequence[str] | None = None,
                 centers: np.ndarray | None = None) -> None:
        self.target = target
        self.labelled = None if labelled is None else [str(i) for i in labelled]
        self.centers = centers

    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        """The first n picks of k-Center-Greedy (n None: every usable row, in greedy order).

        seed: the first pick when there is no labelled point (otherwise unused: deterministic).
        """
        check_table(table, [])
        n = check_n(n)
        target = model_with_column(table, "feat", self.target)
        cols = feature_columns(table.columns, target)
        x = table[cols].to_numpy(dtype=np.float64, na_value=np.nan)
        ok = usable_mask(table) & np.isfinite(x).all(1)
        ids = table["id"].astype(str).to_numpy(dtype=object)
        lab = np.isin(ids, self.labelled) if self.labelled else np.zeros(len(table), bool)
        centers = [x[ok & lab]]
        if self.centers is not None:
            c = np.asarray(self.centers, dtype=np.float64)
            if c.ndim != 2 or c.shape[1] != len(cols):
                raise ValueError(f"centers: expected features float [L, {len(cols)}] (the {len(cols)} "
                                 f"`al_feat__{target}__j` columns), got shape {c.shape}")
            centers.append(c)
        c_all = np.concatenate(centers)
        cand = np.flatnonzero(ok & ~lab)
        k = len(cand) if n is None else min(n, len(cand))
        first = int(np.random.default_rng(seed).integers(len(cand))) if len(cand) and not len(c_all) else None
        picks, dist = k_center_greedy(x[cand], k, c_all, first=first)
        rows = cand[picks]
        # distance None: the seeded first pick without labelled images (no centre to be far from)
        reasons = [dumps_reason({"strategy": "coreset", "target": target,
                                 "distance": round(float(d), 6) if np.isfinite(d) else None,
                                 "n_labelled": int(len(c_all))}) for d in dist]
        return result_frame(ids_at(table, rows), dist, reasons)
