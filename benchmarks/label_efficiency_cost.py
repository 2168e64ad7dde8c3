"""The label-efficiency tables at several costs of a rating against a mask, with paired differences.

A rated sampler's round costs n4 masks plus raters x n_M ratings; an active-learning baseline's costs only
masks. Which is cheaper depends on what a rating costs next to a mask, so every table is printed at the
ratios rating : mask of `RATIOS`: 1:32 (the label editor's 31.6 actions per mask, `blindspots.human.cost`),
1:10, 1:3, and in seconds from published timing: a fine Cityscapes mask takes "more than 1.5 h" (Cordts et
al., "The Cityscapes Dataset for Semantic Urban Scene Understanding", CVPR 2016, arXiv:1604.01685; 5400 s
here), a rating the app's own 0.045 s (`benchmarks/rating_cost.py`) plus `VIEW_SECONDS` = 5 s for a person
to look at the image and its prediction (stated, not measured).

Cost is counted in masks: masks + ratings x ratio. At each ratio the checkpoints are a rated sampler's
cost after each round (the cheapest rated setting's: with one rater; a row with two raters per candidate is
read at those costs off its own curve); every run's mIoU there is read off its own curve (cost, mIoU) by linear
interpolation between its rounds (a baseline labels `--baseline-masks` per round, enough to reach the
rated samplers' cost at 1:3; a checkpoint past a run's last round is left empty). Ranks are by mean over
seeds; a sampler whose rank at a ratio differs from its rank at 1:32 is marked. Paired differences: per
seed, a sampler's value minus the best baseline's (the non-rated sampler with the highest mean at that
checkpoint), mean and a 95% t interval over seeds.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

MASK_SECONDS = 5400.0  # Cordts et al. 2016: more than 1.5 h per fine annotation
APP_RATING_SECONDS = 0.045  # blindspots.human.cost.C_RATE_SECONDS: the rating page's own time
VIEW_SECONDS = 5.0  # stated: a person looking at the image and the target's prediction before a key press
RATIOS = {"1:32": 1 / 32, "1:10": 1 / 10, "1:3": 1 / 3,
          "seconds": (APP_RATING_SECONDS + VIEW_SECONDS) / MASK_SECONDS}


def run_frame(runs: list[dict]) -> pd.DataFrame:
    """One row per (strategy, seed, round): masks, ratings and every measured mIoU."""
    return pd.DataFrame([{"strategy": r["strategy"], "seed": r["seed"], **p} for r in runs for p in r["points"]])


def at_cost(df: pd.DataFrame, ratio: float, checkpoints: np.ndarray, metric: str) -> pd.DataFrame:
    """metric of every (strategy, seed) at each checkpoint cost (masks), interpolated on its own curve;
    NaN past its last round. Returns a frame indexed (strategy, seed) with one column per checkpoint."""
    rows = {}
    for (s, seed), g in df.groupby(["strategy", "seed"], sort=False):
        g = g.sort_values("round")
        cost = g["masks"].to_numpy(float) + ratio * g["ratings"].to_numpy(float)
        v = np.interp(checkpoints, cost, g[metric].to_numpy(float))
        rows[(s, seed)] = np.where(checkpoints <= cost.max() + 1e-9, v, np.nan)
    out = pd.DataFrame(list(rows.values()), columns=[f"r{j + 1}" for j in range(len(checkpoints))])
    out.index = pd.MultiIndex.from_tuples(list(rows), names=["strategy", "seed"])
    return out


def mean_interval(d: np.ndarray) -> tuple[float, float, float]:
    """(mean, lower, upper) of paired differences d float [n]: the 95% t interval (NaN bounds below 2 values)."""
    d = np.asarray(d, dtype=np.float64)
    if len(d) < 2:
        return (float(d.mean()) if len(d) else np.nan, np.nan, np.nan)
    h = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return float(d.mean()), float(d.mean() - h), float(d.mean() + h)


def paired(values: pd.DataFrame, strategy: str, best: str, col: str) -> tuple[float, float, float]:
    """(mean, lower, upper): strategy minus best per seed at column col, 95% t interval over seeds."""
    a, b = values.xs(strategy, level=0)[col], values.xs(best, level=0)[col]
    return mean_interval((a - b).dropna().to_numpy())


def cost_tables(runs: list[dict], rated: tuple[str, ...], metrics: tuple[str, ...] = ("hard", "T0"),
                focus: str | None = None) -> dict:
    """Print, per ratio and metric, mean (sd) at the rated samplers' round costs, ranks and paired
    differences against the best baseline; returns the numbers (JSON-ready)."""
    df = run_frame(runs)
    rated_runs = df[df["strategy"].isin(rated)]
    if rated_runs.empty:
        print("(no rated sampler in the run: no cost sweep)")
        return {}
    # the cheapest rated setting's rounds (one rater: a row with a second rater costs more and is read off its
    # own curve at these costs like a baseline)
    per_round = rated_runs.groupby(["strategy", "round"])[["masks", "ratings"]].mean().groupby(level="round").min()
    per_round = per_round[per_round.index > 0]
    baselines = [s for s in dict.fromkeys(df["strategy"]) if s not in rated]
    out: dict = {}
    ranks_at_first: dict = {}
    for metric in (*metrics, *([focus] if focus else [])):
        for label, ratio in RATIOS.items():
            cp = (per_round["masks"] + ratio * per_round["ratings"]).to_numpy(float)
            vals = at_cost(df, ratio, cp, metric)
            mean = vals.groupby(level=0, sort=False).mean()
            sd = vals.groupby(level=0, sort=False).std(ddof=1)
            rank = mean.rank(ascending=False, method="min")
            key = (metric, label)
            first = ranks_at_first.setdefault(metric, rank)
            table = pd.DataFrame(index=mean.index)
            for c in mean.columns:
                moved = rank[c] != first[c].reindex(rank.index)
                table[f"{c} ({cp[int(c[1:]) - 1]:.1f})"] = [
                    f"{m:.4f} ({s:.4f}) #{int(k)}{'*' if mv and label != '1:32' else ''}" if np.isfinite(m) else "-"
                    for m, s, k, mv in zip(mean[c], sd[c].fillna(np.nan), rank[c].fillna(0), moved)]
            print(f"\n== {metric} mIoU at equal cost, rating:mask {label} (ratio {ratio:.5f}; column = round of the "
                  "rated samplers and its cost in masks; mean (sd) over seeds, #rank, * = rank differs from 1:32) ==")
            print(table.to_string())
            diffs = {}
            for c in mean.columns:
                ok = [b for b in baselines if b in mean.index and np.isfinite(mean.loc[b, c])]
                if not ok:
                    continue
                best = max(ok, key=lambda b: mean.loc[b, c])
                diffs[c] = {"best_baseline": best, **{s: paired(vals, s, best, c) for s in rated if s in mean.index}}
            if diffs:
                print("paired difference against the best baseline at that cost (mean [95% t interval] over seeds):")
                for c, d in diffs.items():
                    parts = ", ".join(f"{s} {m:+.4f} [{lo:+.4f}, {hi:+.4f}]" for s, (m, lo, hi) in
                                      ((s, d[s]) for s in rated if s in d))
                    print(f"  {c}: best baseline {d['best_baseline']}: {parts}")
            out[f"{metric}@{label}"] = {"checkpoints": cp.tolist(), "mean": mean.to_dict("index"),
                                        "sd": sd.to_dict("index"), "rank": rank.to_dict("index"), "paired": diffs}
    return out
