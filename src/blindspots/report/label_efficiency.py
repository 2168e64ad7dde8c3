"""The round report's sampler comparison: mIoU against human cost per sampler (curves and a table).

A project mines with one sampler; the comparison of samplers is a full loop per sampler and seed,
run by `benchmarks/label_efficiency.py`. Its `results.json` copied to the project's
`reports/label_efficiency.json` (the benchmark's `--project DIR` does it) is drawn here: one curve per
sampler (mean over seeds, error bars one standard deviation) for the hard test set and for T0, and
the table of the last round. Without that file the section says how to make it.

Public API: `label_efficiency_figure(table, path)`, `sampler_comparison_section(reports_dir, out, strategy)
-> list[str]` (HTML parts).
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd

from blindspots.report.html import esc, figure_img, rel_url, table

RESULTS = "label_efficiency.json"
RATED = ("mad", "madplus")  # samplers whose candidates people rate first: drawn as solid lines


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


def sampler_comparison_section(reports_dir: Path, out: Path, strategy: str) -> list[str]:
    """HTML parts of the "Sampler comparison" section (figure written to out/figures/)."""
    parts = ['<h2 class="section" id="samplers">Sampler comparison</h2>']
    path = Path(reports_dir) / RESULTS
    if not path.is_file():
        parts.append(f'<p class="note">Not run: this project mines with one sampler ({esc(strategy)}). The '
                     'comparison of every sampler (random, entropy, margin, BALD, PowerBALD, core-set, MAD, MAD+) '
                     'against human cost is a full loop per sampler and seed: <code>benchmarks/label_efficiency.py '
                     f'--project PROJECT</code> puts its results here ({esc(RESULTS)} in reports/).</p>')
        return parts
    try:
        rows = pd.DataFrame(json.loads(path.read_text())["table"])
        need = {"strategy", "round", "cost", "hard_mean", "hard_sd", "T0_mean", "T0_sd"}
        if not need <= set(rows.columns):
            raise ValueError(f"columns {sorted(need - set(rows.columns))} missing")
    except (ValueError, KeyError, TypeError) as e:
        parts.append(f'<p class="note">{esc(path.name)} could not be read: {esc(e)}.</p>')
        return parts
    fig = label_efficiency_figure(rows, Path(out) / "figures" / "label_efficiency.png")
    parts.append('<p class="note">mIoU against human cost (a rating 1 action, a mask 31.6 label-editor actions; '
                 'mean over seeds, bars one standard deviation), from <code>benchmarks/label_efficiency.py'
                 '</code>.</p>')
    parts.append(f'<div class="figs">{figure_img(rel_url(fig, out), "mIoU against human cost per sampler")}</div>')
    last = rows[rows["round"] == rows["round"].max()]
    body = [[r.strategy, f"{r.cost:.0f}", f"{r.hard_mean:.4f} ± {r.hard_sd:.4f}", f"{r.T0_mean:.4f} ± {r.T0_sd:.4f}"]
            for r in last.itertuples(index=False)]
    parts.append(table(["sampler", "cost", "hard mIoU", "T0 mIoU"], body, numeric={1, 2, 3}))
    return parts
