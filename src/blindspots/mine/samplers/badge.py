"""BADGE: k-means++ seeding over gradient embeddings, so the batch is both uncertain and diverse.

Ash, Zhang, Krishnamurthy, Langford & Agarwal 2020, "Deep Batch Active Learning by Diverse, Uncertain
Gradient Lower Bounds" (ICLR, arXiv:1906.03671), Algorithm 1: embed every unlabelled image by the gradient
of the last layer's loss w.r.t. its weights, with the model's own hard prediction as the label
(`al_badge__{M}__{j}`, `blindspots.mine.model_columns.badge_embedding`; for a segmenter the mean over the output's
pixels of the per-pixel embeddings (p_u - e_{y_hat_u}) (x) h_u, computed as one contraction, never as
pixels x K x D), then pick the batch by k-means++ seeding (Arthur & Vassilvitskii 2007) over those
embeddings. The embedding's norm grows with the model's uncertainty (a confident prediction has
p ~ e_y_hat, so g ~ 0), and D^2 sampling spreads the batch over different gradient directions.

As in the paper's implementation (`init_centers`): the first pick is the embedding with the largest
Euclidean norm (ties: the first row), then each next pick is drawn with probability proportional to
D(x)^2, the squared distance to the nearest pick so far. Already-picked images (D = 0) are never drawn
again; when every image left is at distance 0 (exact copies of picks, where the paper's code stops),
the next is drawn uniformly among them. Labelled images are not centres (the paper seeds over the
unlabelled pool alone).

What it needs: the `al_badge__{M}__*` columns of the target, computed once per pool by
`add_acquisition_columns(..., kinds=["badge"])` or `blindspots mine --strategy badge --model SPEC`;
the model must have a 1x1 Conv2d classifier layer and give logits (otherwise that step refuses with a
ValueError saying so, see `badge_embedding`).

Public API: `kmeans_pp_seeding(x, n, rng) -> (picks int64 [n], dist float64 [n])`,
`BADGESampler(target=None)`, `.select(table, n=None, *, seed=0)` -> DataFrame `id, score, reason`, score =
the first pick's gradient norm, then each pick's distance to the nearest earlier pick when it was drawn.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from blindspots.mine.samplers.base import Sampler, check_n, check_table, dumps_reason, ids_at, result_frame, usable_mask
from blindspots.mine.model_columns.names import feature_columns, model_with_column

_CHUNK = 2048  # rows of x whose distance to a new pick are computed at once (bounds the temporary)


def _dist_to(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float64 [N]: Euclidean distance of every row of x [N, D] to the point c [D] (exact differences)."""
    out = np.empty(len(x))
    for s in range(0, len(x), _CHUNK):
        out[s:s + _CHUNK] = np.sqrt(((x[s:s + _CHUNK] - c) ** 2).sum(1))
    return out


def kmeans_pp_seeding(x: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """k-means++ seeding as BADGE runs it.

    x: float [N, E] gradient embeddings; n: how many to pick (at most N); rng: the draws' generator.
    Returns (picks int64 [min(n, N)], dist float64 [min(n, N)]): picks in order; dist[0] is the first
    pick's norm, dist[t] the distance from pick t to its nearest earlier pick when it was drawn.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"x: expected embeddings float [N, E], got shape {x.shape}")
    n = min(int(n), len(x))
    picks, dists = np.empty(n, np.int64), np.empty(n)
    if n == 0:
        return picks, dists
    norms = np.sqrt((x * x).sum(1))
    first = int(np.argmax(norms))  # the paper's code: argmax of the norms, not a random draw
    picks[0], dists[0] = first, norms[first]
    d = _dist_to(x, x[first])
    taken = np.zeros(len(x), bool)
    taken[first] = True
    for t in range(1, n):
        w = np.where(taken, 0.0, d * d)
        total = w.sum()
        if total > 0:
            u = int(rng.choice(len(x), p=w / total))
        else:  # everything left coincides with a pick: uniform among them
            u = int(rng.choice(np.flatnonzero(~taken)))
        picks[t], dists[t] = u, d[u]
        taken[u] = True
        np.minimum(d, _dist_to(x, x[u]), out=d)
    return picks, dists


class BADGESampler(Sampler):
    """k-means++ seeding over `al_badge__{M}__*` gradient embeddings.

    target: model name M of the embedding columns (None: the only model with them).
    """

    def __init__(self, target: str | None = None) -> None:
        self.target = target

    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        """The first n picks of BADGE's seeding (n None: every usable row, in seeding order).

        seed: the D^2 draws (the first pick, the largest norm, does not depend on it).
        """
        check_table(table, [])
        n = check_n(n)
        target = model_with_column(table, "badge", self.target)
        cols = feature_columns(table.columns, target, kind="badge")
        x = table[cols].to_numpy(dtype=np.float64, na_value=np.nan)
        cand = np.flatnonzero(usable_mask(table) & np.isfinite(x).all(1))
        k = len(cand) if n is None else min(n, len(cand))
        picks, dist = kmeans_pp_seeding(x[cand], k, np.random.default_rng(seed))
        rows = cand[picks]
        norms = np.sqrt((x[rows] ** 2).sum(1))
        reasons = [dumps_reason({"strategy": "badge", "target": target, "grad_norm": round(float(g), 6),
                                 "distance": None if t == 0 else round(float(d), 6), "seed": int(seed)})
                   for t, (g, d) in enumerate(zip(norms, dist))]
        return result_frame(ids_at(table, rows), dist, reasons)
