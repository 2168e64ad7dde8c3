"""Random baseline: a uniform sample of the usable images (the paper's implicit control).

Public API (stable): `RandomSampler()`, `.select(table, n=None, *, seed=0)` -> DataFrame
`id, score, reason`; score is the image's uniform random key in [0, 1) (picked in key order).
Same seed and table, same picks; n None gives a full random permutation.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from blindspots.mine.samplers.base import Sampler, check_n, ids_at, check_table, dumps_reason, result_frame, usable_mask


class RandomSampler(Sampler):
    """Uniform random selection without replacement among rows with status 'ok'."""

    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        check_table(table, [])
        n = check_n(n)
        cand = np.flatnonzero(usable_mask(table))
        rng = np.random.default_rng(seed)
        keys = rng.random(len(cand))
        k = len(cand) if n is None else min(n, len(cand))
        order = np.argpartition(keys, k - 1)[:k] if 0 < k < len(cand) else np.arange(len(cand))[:k]
        order = order[np.argsort(keys[order], kind="stable")]
        rows = cand[order]
        reason = dumps_reason({"strategy": "random", "seed": int(seed)})
        return result_frame(ids_at(table, rows), keys[order], [reason] * len(rows))
