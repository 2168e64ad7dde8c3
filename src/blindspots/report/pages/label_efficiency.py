"""The round report's sampler comparison: mIoU against human cost per sampler (curves and a table).

A project mines with one sampler; the comparison of samplers is a full loop per sampler and seed,
run by `benchmarks/label_efficiency.py`. Its `results.json` copied to the project's
`reports/label_efficiency.json` (the benchmark's `--project DIR` does it) is drawn here: one curve per
sampler (mean over seeds, error bars one standard deviation) for the hard test set and for T0, and
the table of the last round. Without that file the section says how to make it.

Public API: `label_efficiency_figure(table, path)`, `sampler_comparison_blocks(reports_dir, out, strategy)`
(view-model blocks) and `sampler_comparison_section(...)` (their HTML).
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd

from blindspots.report.html import rel_url
from blindspots.report.render import render_blocks
from blindspots.report.viewmodels.blocks import Block, Figures, Heading, Image, Table, Text, code

RESULTS = "label_efficiency.json"
# samplers whose candidates people rate first: drawn as solid lines
RATED = ("mad", "mad_released", "madplus", "portfolio", "portfolio_mos")


def label_efficiency_figure(rows: pd.DataFrame, path: Path) -> Path:
    """Two panels (hard set, T0) of mIoU against human cost.

    rows: one row per (strategy, round) with columns strategy, cost, hard_mean, hard_sd, T0_mean, T0_sd.
    Writes a PNG at `path` (folders created) and returns it.
    """
    matplotlib.use("Agg")

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), dpi=90)
    for ax, metric, title in ((axes[0], "hard", "hard test set"), (axes[1], "T0", "T0 (in distribution)")):
        for name, d in rows.groupby("strategy", sort=False):
            rated = name in RATED
            ax.errorbar(d["cost"], d[f"{metric}_mean"], yerr=d[f"{metric}_sd"].fillna(0), fmt="-o" if rated else "--.",
                        ms=3, capsize=2, label=name, lw=1.8 if rated else 1)
        ax.set_xlabel("human cost (label-editor actions)")
        ax.set_ylabel("mIoU")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def portfolio_blocks(reports_dir: Path) -> list[Block]:
    """The portfolio sampler's proposers per round (reports/portfolio.json, written by the loop's mine step):
    each proposer's share of M, its candidates and labelled images, the round's gain on T and its reward.
    Empty when the project does not mine with the portfolio."""
    path = Path(reports_dir) / "portfolio.json"
    if not path.is_file():
        return []
    try:
        rounds = json.loads(path.read_text())["rounds"]
        names = list(dict.fromkeys(p for r in rounds for p in r["shares"]))
    except (ValueError, KeyError, TypeError) as e:
        return [Text.of(f"{path.name} could not be read: {e}.")]
    body = []
    for r in rounds:
        gain = r.get("gain_T")
        for p in names:
            reward = r.get("rewards", {}).get(p)
            body.append([r["round"], p, f"{r['shares'].get(p, 0.0):.0%}", r.get("M", {}).get(p, "") if "M" in r else "",
                         r.get("S", {}).get(p, 0) if "S" in r else "", "" if gain is None else f"{gain:+.4f}",
                         "" if reward is None else f"{reward:+.3f}"])
    return [Text.of("Portfolio: each proposer's share of M per round (EXP3 with a floor, adapted to what its picks "
                    "bought), its candidates in M, its images labelled in S, the round's mIoU gain on its test set "
                    "T and the reward it earned (blank: the round is not finished)."),
            Table(["round", "proposer", "share of M", "in M", "in S", "gain on T", "reward"], body,
                  numeric={0, 2, 3, 4, 5, 6})]


def sampler_comparison_blocks(reports_dir: Path, out: Path, strategy: str) -> list[Block]:
    """The "Sampler comparison" section as view-model blocks (figure written to out/figures/)."""
    parts: list[Block] = [Heading("Sampler comparison", "samplers"), *portfolio_blocks(reports_dir)]
    path = Path(reports_dir) / RESULTS
    if not path.is_file():
        parts.append(Text.of(f"Not run: this project mines with one sampler ({strategy}). The comparison of every "
                             "sampler (random, entropy, margin, BALD, PowerBALD, core-set, BADGE, QBC, MAD, MAD+, the "
                             "portfolio) against human "
                             "cost is a full loop per sampler and seed: ",
                             code("benchmarks/label_efficiency.py --project PROJECT"),
                             f" puts its results here ({RESULTS} in reports/)."))
        return parts
    try:
        rows = pd.DataFrame(json.loads(path.read_text())["table"])
        need = {"strategy", "round", "cost", "hard_mean", "hard_sd", "T0_mean", "T0_sd"}
        if not need <= set(rows.columns):
            raise ValueError(f"columns {sorted(need - set(rows.columns))} missing")
    except (ValueError, KeyError, TypeError) as e:
        parts.append(Text.of(f"{path.name} could not be read: {e}."))
        return parts
    fig = label_efficiency_figure(rows, Path(out) / "figures" / "label_efficiency.png")
    parts.append(Text.of("mIoU against human cost (a rating 1 action, a mask 31.6 label-editor actions; mean over "
                         "seeds, bars one standard deviation), from ", code("benchmarks/label_efficiency.py"), "."))
    parts.append(Figures([Image(rel_url(fig, out), "mIoU against human cost per sampler")]))
    last = rows[rows["round"] == rows["round"].max()]
    body = [[r.strategy, f"{r.cost:.0f}", f"{r.hard_mean:.4f} ± {r.hard_sd:.4f}", f"{r.T0_mean:.4f} ± {r.T0_sd:.4f}"]
            for r in last.itertuples(index=False)]
    parts.append(Table(["sampler", "cost", "hard mIoU", "T0 mIoU"], body, numeric={1, 2, 3}))
    return parts


def sampler_comparison_section(reports_dir: Path, out: Path, strategy: str) -> list[str]:
    """The HTML of `sampler_comparison_blocks` (one part)."""
    return [render_blocks(sampler_comparison_blocks(reports_dir, out, strategy))]
