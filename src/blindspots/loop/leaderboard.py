"""Table 1 of the paper: every model's mIoU on T0 and T(i+1) per round, from the project's metrics."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from blindspots.atomic import write_atomic
from blindspots.loop.project import Project
from blindspots.mine.testset import format_leaderboard, leaderboard

__all__ = ["leaderboard_frame", "write_leaderboard"]


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
