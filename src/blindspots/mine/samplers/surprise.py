"""Surprise-adequacy sampler (Kim et al. 2023): the images whose activation traces are most surprising
to the target model, read from the score table's surprise columns.

Columns (``blindspots.surprise.image.surprise_columns``, added to a scan folder by
``blindspots surprise score --scan`` / ``blindspots.scan.extra.add_columns``, joined by ``read_score_table``):
``surprise_{kind}__{M}`` — image SA (mean z-scored class SA over the predicted classes), and
``surprise_{kind}__{M}__{k}`` — class SA of class k (NaN where the model predicts no pixel of k),
kind in {mdsa, lsa, dsa}.

Public API: ``SurpriseSampler(target=None, *, kind="mdsa", class_id=None, order="high")``,
``.select(table, n=None, *, seed=0)`` -> DataFrame ``id, score, reason`` in priority order,
``.score_samples(table)`` -> float64 [N]: the score it ranks by, for every row (scikit-learn's name).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from blindspots.scan import schema
from blindspots.mine.samplers.base import (
    Sampler, check_n, check_table, column, dumps_reason, result_frame, top_n_indices, usable_mask,
)

KINDS = schema.SURPRISE_KINDS


class SurpriseSampler(Sampler):
    """Highest (or lowest) surprise first.

    target: model name M of the surprise columns (None: the only model with a ``surprise_{kind}__{M}``
        column).
    kind: "mdsa" (default, the paper's choice for its cost), "lsa" or "dsa".
    class_id: rank by the class SA of this class (e.g. vehicles, the paper's RQ3) instead of image SA;
        images without that predicted class are never picked.
    order: "high" (most surprising first: likely failures, retraining data) or "low" (least surprising
        first: the images a label budget can skip, paper RQ2). score is the SA, negated for "low".
    """

    def __init__(self, target: str | None = None, *, kind: str = "mdsa", class_id: int | None = None,
                 order: str = "high") -> None:
        self.target = target
        self.kind = kind
        self.class_id = class_id
        self.order = order

    def _column(self, table: pd.DataFrame) -> tuple[str, str]:
        models = schema.surprise_models(table.columns, self.kind)
        target = self.target
        if not models and target is None:
            present = [schema.surprise(k, m) for k in KINDS for m in schema.surprise_models(table.columns, k)]
            raise ValueError(f"kind: expected `surprise_{self.kind}__<model>` columns in the score table (add "
                             f"them with `Scan.add_surprise` and a {self.kind} estimator, or the `surprise score "
                             f"--scan` command), got none "
                             f"(surprise columns here: {present})")
        if target is None:
            if len(models) != 1:
                raise ValueError(f"target: could not infer the model from `surprise_{self.kind}__{{M}}` columns "
                                 f"(found {models}); pass target= (the `mine` command's --target)")
            target = models[0]
        elif target not in models:
            raise ValueError(f"target: expected a model with `surprise_{self.kind}__{{M}}` columns {models}, got "
                             f"{target!r}; add them with `Scan.add_surprise(estimator, name={target!r})` (the `surprise score "
                             f"--scan ... --name {target}` command)")
        return target, schema.surprise(self.kind, target, self.class_id)

    def _values(self, table: pd.DataFrame) -> tuple[str, np.ndarray]:
        """(target, its surprise per row: float64 [N], NaN where the image has none)."""
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {self.kind!r}")
        if self.order not in ("high", "low"):
            raise ValueError(f"order: expected 'high' or 'low', got {self.order!r}")
        if self.class_id is not None and (isinstance(self.class_id, bool) or int(self.class_id) < 0):
            raise ValueError(f"class_id: expected None or a class id >= 0, got {self.class_id!r}")
        check_table(table, [])
        target, col = self._column(table)
        check_table(table, [col])
        return target, column(table, col)

    def score_samples(self, table: pd.DataFrame) -> np.ndarray:
        """The score `select` ranks by, for every row: the surprise, negated for order="low"; float64 [N] in
        table order (higher is picked first; NaN where an image has no surprise, never picked)."""
        return self._key(self._values(table)[1])

    def _key(self, values: np.ndarray) -> np.ndarray:
        return values if self.order == "high" else -values

    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        """Top-n usable rows by surprise (n None: every row with a finite surprise, ranked).

        seed: accepted for the common interface; the ranking is deterministic (ties keep table order).
        """
        n = check_n(n)
        target, values = self._values(table)
        key = self._key(values)
        cand = np.flatnonzero(usable_mask(table))
        top = top_n_indices(key, len(cand) if n is None else n, cand)
        reasons = [dumps_reason({"strategy": "surprise", "kind": self.kind, "target": target,
                                 "class_id": self.class_id, "order": self.order, "sa": round(float(v), 6)})
                   for v in values[top]]
        return result_frame(table["id"].to_numpy(dtype=object)[top], key[top], reasons)
