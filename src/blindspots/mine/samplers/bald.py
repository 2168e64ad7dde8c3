"""BALD with MC dropout, and its stochastic batch variant PowerBALD.

BALD (Bayesian Active Learning by Disagreement; Houlsby, Huszár, Ghahramani & Lengyel 2011, "Bayesian
Active Learning for Classification and Preference Learning", arXiv:1112.5745) queries the inputs with the
largest mutual information between the prediction and the model parameters,
I[y; w | x] = H[E_w p(y|x,w)] - E_w H[p(y|x,w)]. With MC dropout as the approximate posterior (Gal, Islam
& Ghahramani 2017, "Deep Bayesian Active Learning with Image Data", arXiv:1703.02910: dropout kept on at
test time, T = 20 stochastic passes) both expectations are means over the T passes. For segmentation the
per-pixel mutual information is averaged over the image's pixels (the mean aggregation of Mittal et al.
2023, arXiv:2302.04075). The columns come from `blindspots.mine.model_columns.acquisition` (`al_bald__{M}`), which also
says what happens for a model without dropout layers (refused unless dropout=p is given).

PowerBALD (Kirsch, Farquhar, Atighehchian, Jesson, Branchaud-Charron & Gal, "Stochastic Batch
Acquisition: A Simple Baseline for Deep Active Learning", arXiv:2106.12059) draws a batch without
replacement with probability proportional to BALD^beta instead of taking the top-k, so a batch is not
filled with near-copies of one uncertain image: Gumbel-top-k on beta * log(BALD) (beta = 1, the paper's
default).

Public API: `BALDSampler(target=None)`, `PowerBALDSampler(target=None, *, beta=1.0)`,
`.select(table, n=None, *, seed=0)` -> DataFrame `id, score, reason` in pick order.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from blindspots.mine.model_columns.names import bald_column, model_with_column
from blindspots.mine.samplers.base import (
    Sampler, check_n, check_table, column, dumps_reason, ids_at, result_frame, top_n_indices, usable_mask,
)


class BALDSampler(Sampler):
    """Highest mean pixel BALD mutual information first (top-k, deterministic).

    target: model name M of the `al_bald__{M}` column (None: the only model with one).
    """

    def __init__(self, target: str | None = None) -> None:
        self.target = target

    def _values(self, table: pd.DataFrame) -> tuple[str, np.ndarray]:
        check_table(table, [])
        target = model_with_column(table, "bald", self.target)
        return target, column(table, bald_column(target))

    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        """Top-n usable rows by BALD. seed: accepted for the common interface (deterministic)."""
        n = check_n(n)
        target, bald = self._values(table)
        cand = np.flatnonzero(usable_mask(table))
        top = top_n_indices(bald, len(cand) if n is None else n, cand)
        reasons = [dumps_reason({"strategy": "bald", "target": target, "bald": round(float(v), 6)}) for v in bald[top]]
        return result_frame(ids_at(table, top), bald[top], reasons)


class PowerBALDSampler(BALDSampler):
    """A batch drawn with probability proportional to BALD^beta, without replacement (Gumbel-top-k).

    beta: the power (paper default 1; larger is closer to top-k BALD).
    score: beta * log(BALD) + Gumbel noise, the key the batch was drawn by (the same seed, the same batch).
    """

    def __init__(self, target: str | None = None, *, beta: float = 1.0) -> None:
        super().__init__(target)
        self.beta = beta

    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        if isinstance(self.beta, bool) or not isinstance(self.beta, (int, float)) or not self.beta > 0:
            raise ValueError(f"beta: expected a positive number, got {self.beta!r}")
        n = check_n(n)
        target, bald = self._values(table)
        rng = np.random.default_rng(seed)
        gumbel = rng.gumbel(size=len(bald))  # one draw per row: the batch does not depend on n
        with np.errstate(divide="ignore", invalid="ignore"):
            key = float(self.beta) * np.log(np.clip(bald, 0.0, None)) + gumbel  # BALD 0: -inf, drawn last
        key = np.where(np.isfinite(bald), np.where(np.isneginf(key), -1e300, key), np.nan)
        cand = np.flatnonzero(usable_mask(table))
        top = top_n_indices(key, len(cand) if n is None else n, cand)
        reasons = [dumps_reason({"strategy": "powerbald", "target": target, "bald": round(float(v), 6),
                                 "beta": float(self.beta), "seed": int(seed)}) for v in bald[top]]
        return result_frame(ids_at(table, top), key[top], reasons)
