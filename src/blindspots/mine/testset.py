"""Unbiased test sets T(i+1) ⊂ M(i+1) (paper Section 4.1 "Model evaluation"): which mined candidates
measure the target. Table 1's layout is `blindspots.loop.leaderboard`'s, its ranking stability
`blindspots.loop.ranking`'s.

Public API (stable):
- `main_foreground_class(table, models, *, background=(0,)) -> pandas.Series[int]` (id ->
  class id of the largest foreground class by the models' consensus pixel fraction; -1: none).
- `build_test_set(candidates, *, main_class, out_of_domain=(), exclude=(), size=30,
  max_per_class=4, seed=0) -> DataFrame[id, main_class, reason]`.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from blindspots.mine.samplers.base import check_table, dumps_reason, usable_mask


def main_foreground_class(table: pd.DataFrame, models: Sequence[str], *, background: Iterable[int] = (0,),
                          class_ids: Sequence[int] | None = None) -> pd.Series:
    """The main foreground object of each image, by consensus of several models' predictions.

    Averages `frac__{M}__{k}` over `models` (use the target and every competitor, so no single
    model decides) and takes the largest non-background class.
    Returns int64 Series indexed by id; -1 where no foreground class has any pixel.
    """
    if not models:
        raise ValueError("models: expected at least one model name, got none")
    check_table(table, [])
    bg = {int(b) for b in background}
    if class_ids is None:
        prefix = f"frac__{models[0]}__"
        class_ids = sorted(int(str(c)[len(prefix):]) for c in table.columns if str(c).startswith(prefix))
    fg = [k for k in class_ids if k not in bg]
    if not fg:
        raise ValueError(f"background: expected some classes outside {sorted(bg)}, got classes {list(class_ids)}")
    check_table(table, [f"frac__{m}__{k}" for m in models for k in fg])
    mean = np.zeros((len(table), len(fg)), dtype=np.float64)
    for m in models:
        mean += np.stack([table[f"frac__{m}__{k}"].to_numpy(np.float64, na_value=0.0) for k in fg], axis=1)
    mean /= len(models)
    best = np.asarray(fg, dtype=np.int64)[mean.argmax(axis=1)]
    best[mean.max(axis=1) <= 0] = -1
    return pd.Series(best, index=table["id"].to_numpy(dtype=object), name="main_class")


def build_test_set(candidates: pd.DataFrame | Sequence[str], *, main_class: Mapping[str, int] | pd.Series,
                   out_of_domain: Iterable[str] = (), exclude: Iterable[str] = (), size: int = 30,
                   max_per_class: int = 4, seed: int = 0) -> pd.DataFrame:
    """T(i+1) ⊂ M(i+1) as in the paper's Section 4.1 (defaults: size 30, at most 4 per class).

    candidates: M(i+1), a selection DataFrame with `id` (status-'ok' rows only, if it has a
        status column) or a sequence of ids.
    main_class: id -> main foreground class id (e.g. `main_foreground_class`, or human
        labels); ids with class -1 (no foreground) or missing are not eligible.
    out_of_domain: ids any rater flagged out-of-domain (excluded).
    exclude: ids used to fine-tune the target, i.e. every S(j) so far (excluded).
    seed: the eligible candidates are visited in a seeded random order, so T is not biased
        toward the largest discrepancies; same seed, same T.
    Returns DataFrame [id, main_class, reason] of at most `size` rows.
    """
    if isinstance(candidates, pd.DataFrame):
        check_table(candidates, [], name="candidates")
        ids = candidates["id"].to_numpy(dtype=object)[usable_mask(candidates)]
    else:
        ids = np.asarray(list(candidates), dtype=object)
    for name, v in (("size", size), ("max_per_class", max_per_class)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {v!r}")
    ids = list(dict.fromkeys(str(i) for i in ids))  # de-duplicate, keep order
    mc = main_class.to_dict() if isinstance(main_class, pd.Series) else dict(main_class)
    ood, used = {str(i) for i in out_of_domain}, {str(i) for i in exclude}
    eligible = [i for i in ids if i not in ood and i not in used and int(mc.get(i, -1)) >= 0]
    order = np.random.default_rng(seed).permutation(len(eligible))
    per_class: dict[int, int] = {}
    picked, classes = [], []
    for j in order:
        i = eligible[j]
        k = int(mc[i])
        if per_class.get(k, 0) >= max_per_class:
            continue
        per_class[k] = per_class.get(k, 0) + 1
        picked.append(i)
        classes.append(k)
        if len(picked) >= size:
            break
    reasons = [dumps_reason({"main_class": k, "seed": int(seed)}) for k in classes]
    return pd.DataFrame({"id": np.asarray(picked, dtype=object), "main_class": np.asarray(classes, dtype=np.int64),
                         "reason": reasons})
