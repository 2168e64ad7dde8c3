"""Margin sampling: the images whose target prediction has the smallest best-minus-second-best margin.

Margin (Scheffer, Decomain & Wrobel 2001, "Active Hidden Markov Models for Information Extraction",
IDA; no arXiv) scores a prediction by p_(1) - p_(2), the gap between the two most probable classes;
the smallest gap is queried first. For segmentation the per-pixel margins are aggregated per image by
their mean over all pixels, the image-level aggregation of "Best Practices in Active Learning for
Semantic Segmentation" (Mittal, Niemeijer, Schäfer & Brox 2023, arXiv:2302.04075).

Reads `al_margin__{M}` (`blindspots.mine.model_columns.acquisition`, added once per pool by
`add_acquisition_columns` or `blindspots mine --strategy margin --model SPEC`).

Public API: `MarginSampler(target=None)`, `.select(table, n=None, *, seed=0)` -> DataFrame
`id, score, reason`, score = 1 - mean margin (higher = picked first); ties keep table order.
`.score_samples(table)` -> float64 [N]: that score for every row (scikit-learn's name for per-sample scores).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from blindspots.mine.model_columns.names import margin_column, model_with_column
from blindspots.mine.samplers.base import (
    Sampler, check_n, check_table, column, dumps_reason, ids_at, result_frame, top_n_indices, usable_mask,
)


class MarginSampler(Sampler):
    """Smallest mean pixel margin first (margin sampling, mean aggregation per image).

    target: model name M of the `al_margin__{M}` column (None: the only model with one).
    """

    def __init__(self, target: str | None = None) -> None:
        self.target = target

    def _margins(self, table: pd.DataFrame) -> tuple[str, np.ndarray]:
        """(target, its mean pixel margin per row: float64 [N])."""
        check_table(table, [])
        target = model_with_column(table, "margin", self.target)
        return target, column(table, margin_column(target))

    def score_samples(self, table: pd.DataFrame) -> np.ndarray:
        """The score `select` ranks by, for every row: 1 - the target's mean pixel margin, float64 [N] in table
        order (higher is picked first)."""
        return 1.0 - self._margins(table)[1]

    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        """Top-n usable rows by 1 - mean margin. seed: accepted for the common interface (deterministic)."""
        n = check_n(n)
        target, margin = self._margins(table)
        key = 1.0 - margin
        cand = np.flatnonzero(usable_mask(table))
        top = top_n_indices(key, len(cand) if n is None else n, cand)
        reasons = [dumps_reason({"strategy": "margin", "target": target, "margin": round(float(v), 6)})
                   for v in margin[top]]
        return result_frame(ids_at(table, top), key[top], reasons)
