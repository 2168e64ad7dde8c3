"""Scenario review: decode a few samples per scenario, collect votes, decide the failure scenarios.

Defuse §4.1: 10 samples per scenario (codes from N(μ_j, τ·Σ_j)); each image gets votes with the
class labels plus *none of the above*; an image's label is the vote majority; a scenario is a
failure scenario if more than ρ = 0.5 of its labelled images disagree with the classifier, and
its label is the majority of its images' labels.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
import pandas as pd
from PIL import Image

from blindspots._validation import check_number
from blindspots.human.votes import NONE, majority_vote
from blindspots.models.protocol import Classifier
from blindspots.scenarios.clustering import Scenarios
from blindspots.scenarios.sampling import sample_codes


class Decoder(Protocol):
    """What review needs of a generative model (e.g. `defuse.vae.BetaVAE`): latent codes -> images."""

    latent_dim: int

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """float32 [N, latent_dim] -> uint8 [N, H, W, C]."""


@dataclass
class ReviewSet:
    """Images to review. items: DataFrame(item_id, scenario, prediction); images: uint8 [N, H, W, C];
    codes: float32 [N, D]; class_names: the label space."""

    items: pd.DataFrame
    images: np.ndarray
    codes: np.ndarray
    class_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.items)


def predict(classifier: Classifier, images: np.ndarray, num_classes: int) -> np.ndarray:
    """Argmax class of a Classifier on uint8 images, checking its class count -> int64 [N]."""
    if int(classifier.num_classes) != num_classes:
        raise ValueError(f"classifier: expected {num_classes} classes, got num_classes={classifier.num_classes}")
    if len(images) == 0:
        return np.zeros(0, dtype=np.int64)
    proba = np.asarray(classifier.predict_proba(images))
    if proba.shape != (len(images), num_classes):
        raise ValueError(f"classifier: expected probabilities of shape ({len(images)}, {num_classes}), got {proba.shape}")
    return proba.argmax(1).astype(np.int64)


def build_review(scenarios: Scenarios, vae: Decoder, classifier: Classifier, class_names: Sequence[str], *,
                 n_per: int = 10, tau: float = 0.5, seed: int = 0) -> ReviewSet:
    """Sample `n_per` images per scenario (paper: 10, τ = 0.5 for MNIST) with the classifier's predictions."""
    if scenarios.latent_dim != vae.latent_dim:
        raise ValueError(f"scenarios: expected codes of dimension {vae.latent_dim} (the VAE's), "
                         f"got {scenarios.latent_dim}")
    codes, scen = sample_codes(scenarios.means, scenarios.covariances, n_per, tau=tau, seed=seed)
    images = vae.decode(codes)
    pred = predict(classifier, images, len(class_names))
    within = np.tile(np.arange(n_per), len(scenarios))
    items = pd.DataFrame({"item_id": [f"s{j:03d}-{i:03d}" for j, i in zip(scen, within)],
                          "scenario": scen, "prediction": pred})
    return ReviewSet(items, images, codes, tuple(class_names))


def export_review(review: ReviewSet, out_dir: str | Path) -> Path:
    """Write images/<item_id>.png, items.csv, review.npz, classes.json and an empty votes_template.csv."""
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    for item_id, img in zip(review.items["item_id"], review.images):
        Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img).save(out / "images" / f"{item_id}.png")
    items = review.items.assign(prediction_name=[review.class_names[p] for p in review.items["prediction"]],
                                image=[f"images/{i}.png" for i in review.items["item_id"]])
    items.to_csv(out / "items.csv", index=False)
    np.savez_compressed(out / "review.npz", codes=review.codes, images=review.images)
    (out / "classes.json").write_text(json.dumps({"class_names": list(review.class_names),
                                                  "none_label": "none"}, indent=2))
    pd.DataFrame({"item_id": review.items["item_id"], "image": items["image"], "annotator": "",
                  "label": ""}).to_csv(out / "votes_template.csv", index=False)
    return out


def load_review(out_dir: str | Path) -> ReviewSet:
    """Read a folder written by `export_review`."""
    out = Path(out_dir)
    for name in ("items.csv", "review.npz", "classes.json"):
        if not (out / name).is_file():
            raise ValueError(f"out_dir: expected {name} from export_review in {str(out)!r}, got none")
    items = pd.read_csv(out / "items.csv", dtype={"item_id": str})
    with np.load(out / "review.npz") as z:
        codes, images = z["codes"], z["images"]
    names = tuple(json.loads((out / "classes.json").read_text())["class_names"])
    return ReviewSet(items[["item_id", "scenario", "prediction"]], images, codes, names)


def decide_scenarios(review: ReviewSet, votes: pd.DataFrame, *, rho: float = 0.5
                     ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Apply the paper's rule to votes on a review set.

    Returns (scenario table, item table). Scenario table, one row per scenario: n_items, n_labelled
    (items whose majority is a class), n_disagree, disagree_frac, is_failure (disagree_frac > rho),
    label (majority item label; NONE if no item is labelled), label_name. Item table: items with
    label, n_votes, agreement, disagrees, in_failure_scenario.
    """
    check_number(rho, "rho", low=0, high=1, high_open=True)
    k = len(review.class_names)
    known = set(review.items["item_id"].astype(str))
    unknown = sorted(set(votes["item_id"].astype(str)) - known) if "item_id" in votes else []
    if unknown:
        raise ValueError(f"votes: expected item ids from the review set, got unknown ids {unknown[:5]}")
    maj = majority_vote(votes, k)
    items = review.items.merge(maj, on="item_id", how="left")
    items["label"] = items["label"].fillna(NONE).astype(np.int64)
    items["n_votes"] = items["n_votes"].fillna(0).astype(np.int64)
    labelled = items["label"] != NONE
    items["disagrees"] = labelled & (items["label"] != items["prediction"])
    rows = []
    for j, g in items.groupby("scenario", sort=True):
        lab = g.loc[g["label"] != NONE, "label"].to_numpy()
        n_dis = int(g["disagrees"].sum())
        frac = n_dis / len(lab) if len(lab) else 0.0
        label = int(np.bincount(lab, minlength=k).argmax()) if len(lab) else NONE
        rows.append({"scenario": int(j), "n_items": int(len(g)), "n_labelled": int(len(lab)), "n_disagree": n_dis,
                     "disagree_frac": frac, "is_failure": bool(len(lab) > 0 and frac > rho), "label": label,
                     "label_name": review.class_names[label] if label != NONE else "none"})
    table = pd.DataFrame(rows)
    failing = set(table.loc[table["is_failure"], "scenario"]) if len(table) else set()
    items["in_failure_scenario"] = items["scenario"].isin(failing)
    return table, items
