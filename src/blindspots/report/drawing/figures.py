"""Report figures as PNG files (matplotlib, Agg backend: no display, no network).

Each function takes plain arrays, writes one PNG and returns its path; the report pages link them
relatively. Figures are small (about 6 x 3.2 inches at 100 dpi) so a page with many stays light.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

DPI = 100


def _pyplot():
    matplotlib.use("Agg", force=False)  # headless; a no-op when Agg is already active

    return plt


def _save(fig, path: Path) -> Path:  # noqa: ANN001
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _pyplot().close(fig)
    return path


def _integer_counts(axis) -> None:  # noqa: ANN001
    """Whole-number ticks on an axis of counts (no "0.5 images")."""
    axis.set_major_locator(MaxNLocator(integer=True))


def histograms(series: Mapping[str, np.ndarray], path: str | Path, *, xlabel: str, title: str,
               bins: int = 30, value_range: tuple[float, float] | None = None) -> Path:
    """Overlaid histograms, one per named float [N] array (NaN ignored); writes `path` (PNG).

    value_range: fixed (low, high) of the bins and the x axis (e.g. (1, 5) for MOS), else the data's."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    clean = {name: np.asarray(v, dtype=np.float64)[np.isfinite(np.asarray(v, dtype=np.float64))]
             for name, v in series.items()}
    clean = {name: v for name, v in clean.items() if len(v)}
    shown = len(clean)
    if shown:  # common bins, so series are comparable; a constant value gets a narrow visible bin
        lo = min(float(v.min()) for v in clean.values())
        hi = max(float(v.max()) for v in clean.values())
        if value_range is not None:
            lo, hi = map(float, value_range)
        elif hi - lo < 1e-9:
            pad = max(abs(lo), 1.0) * 0.05
            lo, hi = lo - pad, hi + pad
        edges = np.linspace(lo, hi, bins + 1)
        for name, v in clean.items():  # outlines: overlapping series stay visible
            n, _, patches = ax.hist(v, bins=edges, histtype="stepfilled", alpha=0.25)
            ax.hist(v, bins=edges, histtype="step", linewidth=1.6, color=patches[0].get_facecolor()[:3],
                    label=f"{name} (n={len(v)}, mean {v.mean():.3g})")
    if not shown:
        ax.text(0.5, 0.5, "no values", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("images")
    _integer_counts(ax.yaxis)
    ax.set_title(title)
    if shown:
        ax.legend(fontsize=8)
    return _save(fig, Path(path))


def bars(labels: Sequence[str], values: np.ndarray, path: str | Path, *, ylabel: str, title: str,
         counts: bool = False) -> Path:
    """A bar chart of float [K] `values` named by `labels`; writes `path` (PNG). counts: the values
    count things (whole-number ticks)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    x = np.arange(len(labels))
    ax.bar(x, np.asarray(values, dtype=np.float64), color="#4c72b0")
    ax.set_xticks(x)
    long = max((len(str(x)) for x in labels), default=0) > 4  # short labels ("0".."4") stay upright
    ax.set_xticklabels(list(labels), rotation=30 if long else 0, ha="right" if long else "center", fontsize=8)
    if counts:
        _integer_counts(ax.yaxis)
    ax.axhline(0, color="#444", linewidth=0.8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return _save(fig, Path(path))


def line(x: np.ndarray, y: np.ndarray, path: str | Path, *, xlabel: str, ylabel: str, title: str,
         ylim: tuple[float, float] | None = None) -> Path:
    """One line with markers, float [N] `y` over [N] `x` (NaN drawn as gaps); writes `path` (PNG)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(np.asarray(x), np.asarray(y, dtype=np.float64), marker="o", color="#4c72b0")
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _integer_counts(ax.xaxis)  # k counts images
    return _save(fig, Path(path))
