"""Defuse figures: λ trade-off (Figure 5), latent t-SNE (Figure 2), nearest training neighbours of
scenario samples (workshop Figure 6), scenario sample grids with predictions (Figure 3)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.manifold import TSNE


def _plt():
    matplotlib.use("Agg")

    return plt


def _show(ax, img: np.ndarray) -> None:
    ax.imshow(img[..., 0] if img.shape[-1] == 1 else img, cmap="gray" if img.shape[-1] == 1 else None,
              vmin=0, vmax=255)
    ax.set_xticks([])
    ax.set_yticks([])


def plot_tradeoff(sweeps: dict[str, pd.DataFrame], path: str | Path, *, x: str = "test_acc",
                  y: str = "scenario_acc", title: str = "Test vs failure-scenario accuracy over λ") -> Path:
    """Figure 5: one curve per sweep (e.g. Defuse, baseline); each point a λ, labelled with its value."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, df in sweeps.items():
        for col in (x, y, "lambda"):
            if col not in df.columns:
                raise ValueError(f"sweeps[{name!r}]: expected a column {col!r}, got {list(df.columns)}")
        ax.plot(df[x] * 100, df[y] * 100, "o-", label=name, alpha=0.8)
        for _, r in df.iterrows():
            ax.annotate(f"{r['lambda']:g}", (r[x] * 100, r[y] * 100), fontsize=6, alpha=0.7)
    ax.set_xlabel("test accuracy (%)")
    ax.set_ylabel("failure-scenario test accuracy (%)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_tsne(train_codes: np.ndarray, failure_codes: np.ndarray, path: str | Path, *, perplexity: float = 30.0,
              max_train: int = 10_000, seed: int = 0, examples: np.ndarray | None = None,
              example_preds: Sequence[int] | None = None) -> Path:
    """Figure 2: t-SNE of training latents (blue circles) with identified failures (black diamonds).

    train_codes: float [N, D] (at most `max_train` used, paper 10,000); failure_codes: float [M, D]
    (paper: only those with > 1% probability of a failure scenario); perplexity 30 as in the paper.
    examples: optional uint8 [3, H, W, C] decoded failures shown beside the plot with predictions.
    """
    train_codes, failure_codes = np.asarray(train_codes, np.float32), np.asarray(failure_codes, np.float32)
    if train_codes.ndim != 2 or failure_codes.ndim != 2 or train_codes.shape[1] != failure_codes.shape[1]:
        raise ValueError(f"failure_codes: expected [M, {train_codes.shape[-1]}] like train_codes, got "
                         f"{failure_codes.shape} and {train_codes.shape}")
    rng = np.random.default_rng(seed)
    if len(train_codes) > max_train:
        train_codes = train_codes[np.sort(rng.choice(len(train_codes), max_train, replace=False))]
    both = np.concatenate([train_codes, failure_codes])
    emb = TSNE(n_components=2, perplexity=min(perplexity, max(2.0, (len(both) - 1) / 3)), random_state=seed,
               init="pca").fit_transform(both)
    plt = _plt()
    n_ex = 0 if examples is None else len(examples)
    fig = plt.figure(figsize=(6 + 1.5 * (n_ex > 0), 5))
    ax = fig.add_axes([0.05, 0.05, 0.7 if n_ex else 0.9, 0.88])
    nt = len(train_codes)
    ax.scatter(emb[:nt, 0], emb[:nt, 1], s=3, c="tab:blue", alpha=0.3, label="training images")
    ax.scatter(emb[nt:, 0], emb[nt:, 1], s=12, c="black", marker="D", label="identified failures")
    ax.legend(loc="lower right", fontsize=7)
    ax.set_title("t-SNE of latent codes")
    ax.set_xticks([])
    ax.set_yticks([])
    for i in range(n_ex):
        sub = fig.add_axes([0.78, 0.68 - 0.3 * i, 0.2, 0.25])
        _show(sub, examples[i])  # type: ignore[index]
        if example_preds is not None:
            sub.text(1, 4, str(example_preds[i]), color="red", fontsize=12, weight="bold", va="top")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def nearest_neighbours(samples: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ℓ2 nearest reference image for each sample (pixels as floats) -> (index int64 [n], distance float [n])."""
    a = samples.reshape(len(samples), -1).astype(np.float32)
    b = reference.reshape(len(reference), -1).astype(np.float32)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"reference: expected images of shape {samples.shape[1:]}, got {reference.shape[1:]}")
    d2 = (a ** 2).sum(1)[:, None] - 2 * a @ b.T + (b ** 2).sum(1)[None]
    idx = d2.argmin(1)
    return idx.astype(np.int64), np.sqrt(np.maximum(d2[np.arange(len(a)), idx], 0))


def plot_nearest_neighbours(samples: np.ndarray, sample_preds: Sequence[int], reference: np.ndarray,
                            reference_preds: Sequence[int], path: str | Path,
                            reference_name: str = "misclassified training images") -> Path:
    """Workshop Figure 6: top row scenario samples, bottom row their ℓ2-nearest `reference` images;
    the model's prediction in red on each."""
    if len(reference) == 0:
        raise ValueError("reference: expected at least one reference image, got 0")
    idx, dist = nearest_neighbours(samples, reference)
    plt = _plt()
    n = len(samples)
    fig, axes = plt.subplots(2, n, figsize=(1.2 * n, 2.9), squeeze=False)
    for i in range(n):
        _show(axes[0, i], samples[i])
        axes[0, i].text(1, 1, str(sample_preds[i]), color="red", fontsize=10, weight="bold", va="top")
        _show(axes[1, i], reference[idx[i]])
        axes[1, i].text(1, 1, str(reference_preds[idx[i]]), color="red", fontsize=10, weight="bold", va="top")
        axes[1, i].set_xlabel(f"{dist[i]:.0f}", fontsize=7)
    axes[0, 0].set_ylabel("scenario", fontsize=8)
    axes[1, 0].set_ylabel("nearest", fontsize=8)
    fig.suptitle(f"Scenario samples and their nearest {reference_name} (ℓ2 distance below)", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_scenario_grids(images: np.ndarray, preds: np.ndarray, scenario: np.ndarray, path: str | Path, *,
                        labels: dict[int, str] | None = None, per_row: int = 10) -> Path:
    """Figure 3: one row of samples per scenario, the classifier's prediction in red on each image.

    images: uint8 [n, H, W, C]; preds, scenario: int [n]; labels: scenario id -> annotator label text.
    """
    ids = list(dict.fromkeys(np.asarray(scenario).tolist()))
    if not ids:
        raise ValueError("scenario: expected at least one scenario to draw, got none")
    plt = _plt()
    fig, axes = plt.subplots(len(ids), per_row, figsize=(1.0 * per_row, 1.15 * len(ids) + 0.3), squeeze=False)
    for r, j in enumerate(ids):
        sel = np.flatnonzero(scenario == j)[:per_row]
        for c in range(per_row):
            ax = axes[r, c]
            ax.axis("off")
            if c < len(sel):
                _show(ax, images[sel[c]])
                ax.text(1, 1, str(preds[sel[c]]), color="red", fontsize=9, weight="bold", va="top")
        text = f"scenario {j}" + (f" (label {labels[j]})" if labels and j in labels else "")
        axes[r, 0].set_title(text, fontsize=7, loc="left")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
