"""Scenario sampler: mine the pool images nearest each confirmed failure scenario.

After a round, `blindspots.scenarios.segmentation.find_scenarios` groups the confirmed failures
into scenarios; this sampler ranks the pool's usable images by how much better each scenario's
Gaussian explains them than the pool's own distribution (log density ratio, in the same
standardised feature space) and takes them round-robin over the
scenarios, nearest first, so every failure mode gets images in the next round. The failures the
scenarios were found from are never picked again.

Features come from `features` (a DataFrame indexed by image id, e.g. `scan_attributes`) or, when
None, from the score table's own columns of the same names; `activations` (DataFrame indexed by
id, one float column per dimension) when the scenarios were found with activations.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from blindspots.mine.samplers.base import Sampler, check_n, check_table, dumps_reason, ids_at, result_frame, usable_mask


class ScenarioSampler(Sampler):
    """Round-robin over scenarios, nearest pool images first.

    scenarios: a `SegmentationScenarios` (duck-typed: `log_density`, `summaries`, `failures`).
    features: DataFrame indexed by id with the scenarios' attribute columns (None: the table's); pool
        images without a feature row (or, with activations, without an activation row) are skipped.
    activations: DataFrame indexed by id (None when the scenarios used none).
    which: scenario indices to mine (default all).
    """

    def __init__(self, scenarios: Any, features: pd.DataFrame | None = None,
                 activations: pd.DataFrame | None = None, which: Sequence[int] | None = None) -> None:
        if not hasattr(scenarios, "log_density") or not hasattr(scenarios, "summaries"):
            raise ValueError(f"scenarios: expected SegmentationScenarios (find_scenarios), got {type(scenarios).__name__}")
        if features is not None and not isinstance(features, pd.DataFrame):
            raise ValueError(f"features: expected a DataFrame indexed by image id or None, got {type(features).__name__}")
        if activations is not None and not isinstance(activations, pd.DataFrame):
            raise ValueError(f"activations: expected a DataFrame indexed by image id or None, "
                             f"got {type(activations).__name__}")
        self.scenarios = scenarios
        self.features = features
        self.activations = activations
        self.which = None if which is None else [int(j) for j in which]
        if self.which is not None and any(not 0 <= j < len(scenarios.summaries) for j in self.which):
            raise ValueError(f"which: expected scenario indices in [0, {len(scenarios.summaries)}), got {self.which}")

    def get_params(self) -> dict[str, Any]:
        return {"scenarios": len(self.scenarios.summaries), "which": self.which}

    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        check_table(table, [])
        n = check_n(n)
        cand = np.flatnonzero(usable_mask(table))
        ids = ids_at(table, cand)
        known = set(self.scenarios.failures)
        fresh = np.array([i not in known for i in ids], dtype=bool)
        cand, ids = cand[fresh], ids[fresh]
        if self.features is None:
            feats = table.iloc[cand].set_index(table["id"].iloc[cand].astype(str))
        else:
            have = self.features.index.astype(str)
            keep = np.isin(ids, have)
            cand, ids = cand[keep], ids[keep]
            feats = self.features.set_axis(have).loc[list(ids)]
        acts = None
        if self.activations is not None:
            a_ids = self.activations.index.astype(str)
            keep = np.isin(ids, a_ids)
            cand, ids, feats = cand[keep], ids[keep], feats[keep]
            acts = self.activations.set_axis(a_ids).loc[list(ids)].to_numpy(np.float64)
        which = list(range(len(self.scenarios.summaries))) if self.which is None else self.which
        if len(cand) == 0 or not which:
            return result_frame([], np.empty(0), [], scenario=np.empty(0, np.int64), log_ratio=np.empty(0))
        dens = self.scenarios.log_ratio(feats, acts)[:, which]  # [N, J']: scenario vs pool
        queues = [np.lexsort((np.arange(len(cand)), -dens[:, c])) for c in range(len(which))]
        limit = len(cand) if n is None else min(n, len(cand))
        taken = np.zeros(len(cand), dtype=bool)
        picked, scen, dval = [], [], []
        pos = [0] * len(which)
        while len(picked) < limit:  # round-robin: the next unpicked nearest image of each scenario
            for c, q in enumerate(queues):
                while pos[c] < len(q) and taken[q[pos[c]]]:
                    pos[c] += 1
                if pos[c] < len(q) and len(picked) < limit:
                    r = q[pos[c]]
                    taken[r] = True
                    picked.append(r)
                    scen.append(which[c])
                    dval.append(dens[r, c])
        picked_arr = np.asarray(picked, dtype=np.int64)
        reasons = [dumps_reason({"strategy": "scenario", "scenario": int(s),
                                 "description": self.scenarios.summaries[s].description,
                                 "log_ratio": round(float(d), 3)}) for s, d in zip(scen, dval)]
        score = 1.0 - np.arange(len(picked_arr)) / max(len(picked_arr), 1)  # pick order (round-robin)
        return result_frame(ids_at(table, cand[picked_arr]), score, reasons,
                            scenario=np.asarray(scen, dtype=np.int64), log_ratio=np.asarray(dval, np.float64))
