"""Table 1 of the paper: every model's mIoU on T0 and T(i+1) per round, from the project's metrics."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from blindspots.atomic import write_atomic
from blindspots.loop.project import Project

__all__ = ["format_leaderboard", "leaderboard", "leaderboard_frame", "write_leaderboard"]


def leaderboard_frame(project: Project) -> pd.DataFrame:
    """Table 1: mIoU on T0 and T(i+1) per round i, competitors then the target (version i in
    round i). Columns: MultiIndex (round, test set); an empty frame before any evaluation."""
    c = project.config
    results: dict[str, dict] = {g.name: {} for g in c.competitors}
    results[c.target.name] = {}
    any_round = False
    for i in range(c.project.rounds + 1):
        st = project.journal.step(i, "evaluate")
        if st is None or st["status"] != "done":
            continue
        any_round = True
        for name, version in [(c.target.name, i)] + [(g.name, 0) for g in c.competitors]:
            for ts in ("T0", f"T{i + 1}") if c.data.val else (f"T{i + 1}",):  # label plan: maybe no T0
                v = project.registry.metric(name, version, ts)
                results[name][(f"round {i}", ts)] = np.nan if v is None else v
    if not any_round:
        return pd.DataFrame()
    return leaderboard(results, target=c.target.name, competitors=[g.name for g in c.competitors])


def write_leaderboard(project: Project) -> Path:
    """reports/leaderboard.txt and .csv from `leaderboard_frame` (nothing before any evaluation)."""
    df = leaderboard_frame(project)
    out = project.reports_dir / "leaderboard.txt"
    if len(df):
        write_atomic(out, lambda tmp: tmp.write_text(format_leaderboard(df) + "\n"))
        write_atomic(project.reports_dir / "leaderboard.csv", df.to_csv)
    return out


def leaderboard(results: Mapping[str, Mapping[Any, float]], *, target: str | Sequence[str] | None = None,
                competitors: Sequence[str] | None = None) -> pd.DataFrame:
    """Table 1: every model's mIoU on T0 and on each T(i).

    results: model -> {test set: mIoU}; test-set keys are strings ("T0", "T1") or tuples
        (round, test set), e.g. ("round 0", "T1"), which give grouped (MultiIndex) columns.
        For the target, use one row per version or key its columns by round as in Table 1.
    target: the target's row name(s) (listed last, role "target"); competitors: row order
        for the rest (default: sorted).
    Returns DataFrame indexed by model with a `role` column then one column per test set
    (NaN where a model was not evaluated on a set).
    """
    if not isinstance(results, Mapping) or not results:
        raise ValueError(f"results: expected a non-empty dict model -> {{test set: mIoU}}, got {type(results).__name__}")
    targets = [] if target is None else ([target] if isinstance(target, str) else list(target))
    missing = [t for t in targets if t not in results]
    if missing:
        raise ValueError(f"target: expected model names in results {sorted(results)}, got {missing}")
    comps = list(competitors) if competitors is not None else sorted(m for m in results if m not in targets)
    cols: list[Any] = []
    for m in results.values():
        for key in m:
            if key not in cols:
                cols.append(key)
    rows = comps + targets
    data = {c: [float(results.get(r, {}).get(c, np.nan)) for r in rows] for c in cols}
    df = pd.DataFrame(data, index=pd.Index(rows, name="model"))
    if cols and all(isinstance(c, tuple) for c in cols):
        df.columns = pd.MultiIndex.from_tuples(cols, names=["round", "test set"])
        df.insert(0, ("", "role"), ["target" if r in targets else "competitor" for r in rows])
    else:
        df.insert(0, "role", ["target" if r in targets else "competitor" for r in rows])
    return df


def format_leaderboard(df: pd.DataFrame, digits: int = 4) -> str:
    """Plain-text rendering of `leaderboard(...)` (mIoU with `digits` decimals)."""
    return df.to_string(float_format=lambda v: f"{v:.{digits}f}", na_rep="—")
