"""Entropy baseline (paper Appendix A, after Joshi et al. 2009): the images whose target
prediction has the highest mean per-pixel entropy.

Public API (stable): `EntropySampler(target=None, *, column_prefix="entropy")`,
`.select(table, n=None, *, seed=0)` -> DataFrame `id, score, reason` (score = mean entropy of
the target's softmax, nats), highest first; ties keep table order. `.score_samples(table)` -> float64 [N],
that score for every row of the table (scikit-learn's name for per-sample scores).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from blindspots.scan import schema
from blindspots.mine.samplers.base import (
    Sampler, ids_at, check_n, check_table, column, dumps_reason, infer_target, result_frame, top_n_indices, usable_mask,
)


class EntropySampler(Sampler):
    """Highest mean target entropy first.

    target: target model name (None: inferred from the table's distance columns, or the only
        `entropy__{M}` column).
    column_prefix: "entropy" (mean entropy, the paper's baseline) or "maxprob" to rank by
        lowest mean max-probability instead (least-confidence sampling).
    """

    def __init__(self, target: str | None = None, *, column_prefix: str = "entropy") -> None:
        self.target = target
        self.column_prefix = column_prefix

    def _target(self, table: pd.DataFrame) -> str:
        if self.target is not None:
            return self.target
        models = schema.confidence_models(table.columns, self.column_prefix)
        if len(models) == 1:
            return models[0]
        return infer_target(table, "dpa")

    def _values(self, table: pd.DataFrame) -> tuple[str, np.ndarray]:
        """(target, its mean entropy or max-probability per row: float64 [N])."""
        if self.column_prefix not in ("entropy", "maxprob"):
            raise ValueError(f"column_prefix: expected 'entropy' or 'maxprob', got {self.column_prefix!r}")
        check_table(table, [])
        target = self._target(table)
        col = schema.confidence(self.column_prefix, target)
        check_table(table, [col])
        return target, column(table, col)

    def _key(self, values: np.ndarray) -> np.ndarray:
        return values if self.column_prefix == "entropy" else -values  # least confident first

    def score_samples(self, table: pd.DataFrame) -> np.ndarray:
        """The score `select` ranks by, for every row: float64 [N] in table order (higher is picked first):
        the target's mean entropy, or minus its mean max-probability for column_prefix="maxprob"."""
        return self._key(self._values(table)[1])

    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        """Top-n usable rows by target entropy (n None: every usable row, ranked).

        seed: accepted for the common interface; the ranking is deterministic.
        """
        n = check_n(n)
        target, values = self._values(table)
        key = self._key(values)
        cand = np.flatnonzero(usable_mask(table))
        top = top_n_indices(key, len(cand) if n is None else n, cand)
        reasons = [dumps_reason({"strategy": self.column_prefix, "target": target, "value": round(float(v), 6)})
                   for v in values[top]]
        return result_frame(ids_at(table, top), key[top], reasons)
