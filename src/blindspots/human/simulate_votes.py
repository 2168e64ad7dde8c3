"""SIMULATED voting annotators (not people): an oracle classifier plus noise casts the votes.

Stands in for crowd workers (the Defuse paper used 5 Amazon SageMaker Ground Truth workers per
image) until real votes arrive from the app or a CSV. Each simulated annotator, per image:
- with probability `error_rate` votes a uniformly random class (a slip);
- votes *none of the above* if the oracle's top probability is below `none_threshold`;
- otherwise votes a class drawn from the oracle's probabilities sharpened/flattened by
  `temperature` (p^(1/T), renormalised) — so ambiguous images get split votes, as with people.
The oracle should be a classifier trained on more (or cleaner) data than the model under test.
Every vote row carries `simulated=True` and annotator names start with "simulated-".

The same oracle is the *simulated judge* of the honest Defuse table (`defuse.evaluation`): it scores
scenario samples independently of their scenario labels. A weak judge makes that column noise, so
it should reach `STRONG_JUDGE` (95%) on the data set's test set; `oracle_accuracy` measures it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from blindspots.human.votes import NONE
from blindspots.models.adapters import Classifier


STRONG_JUDGE = 0.95  # test accuracy a simulated judge should reach


def oracle_accuracy(oracle: Classifier, images: np.ndarray, labels: np.ndarray) -> float:
    """The oracle's (simulated judge's) accuracy on uint8 [N, H, W, C] images with int [N] labels;
    compare with STRONG_JUDGE."""
    labels = np.asarray(labels)
    if labels.shape != (len(images),) or len(labels) == 0:
        raise ValueError(f"labels: expected {len(images)} labels (one per image, at least one), got {labels.shape}")
    return float((np.asarray(oracle.predict_proba(images)).argmax(1) == labels).mean())


class SimulatedAnnotators:
    """A panel of `n_annotators` simulated voters driven by an oracle classifier (a SIMULATION)."""

    def __init__(self, oracle: Classifier, n_annotators: int = 5, temperature: float = 1.0,
                 error_rate: float = 0.05, none_threshold: float = 0.0, seed: int = 0):
        if n_annotators < 1:
            raise ValueError(f"n_annotators: expected a positive integer, got {n_annotators}")
        if temperature <= 0:
            raise ValueError(f"temperature: expected a positive number, got {temperature}")
        if not 0 <= error_rate <= 1:
            raise ValueError(f"error_rate: expected a probability in [0, 1], got {error_rate}")
        if not 0 <= none_threshold <= 1:
            raise ValueError(f"none_threshold: expected a probability in [0, 1], got {none_threshold}")
        self.oracle = oracle
        self.n_annotators = n_annotators
        self.temperature = temperature
        self.error_rate = error_rate
        self.none_threshold = none_threshold
        self.seed = seed

    @property
    def annotators(self) -> list[str]:
        return [f"simulated-{i}" for i in range(self.n_annotators)]

    def vote(self, images: np.ndarray, item_ids: Sequence[str]) -> pd.DataFrame:
        """Votes on uint8 [N, H, W, C] images -> DataFrame(item_id, annotator, label, simulated).

        label: class id, or NONE (-1) for *none of the above*. Deterministic per seed and item order.
        """
        item_ids = [str(i) for i in item_ids]
        if len(item_ids) != len(images):
            raise ValueError(f"item_ids: expected {len(images)} ids (one per image), got {len(item_ids)}")
        if len(images) == 0:
            return pd.DataFrame({"item_id": [], "annotator": [], "label": np.zeros(0, np.int64), "simulated": []})
        proba = np.asarray(self.oracle.predict_proba(images), dtype=np.float64)
        k = proba.shape[1]
        sharp = proba ** (1.0 / self.temperature)
        sharp /= sharp.sum(axis=1, keepdims=True)
        cdf = np.cumsum(sharp, axis=1)
        rng = np.random.default_rng(self.seed)
        n, m = len(images), self.n_annotators
        u = rng.random((n, m))
        drawn = (u[..., None] > cdf[:, None, :]).sum(axis=2).clip(max=k - 1)
        slip = rng.random((n, m)) < self.error_rate
        random_class = rng.integers(0, k, size=(n, m))
        labels = np.where(slip, random_class, drawn)
        unsure = proba.max(axis=1) < self.none_threshold
        labels = np.where(unsure[:, None] & ~slip, NONE, labels)
        return pd.DataFrame({"item_id": np.repeat(item_ids, m), "annotator": np.tile(self.annotators, n),
                             "label": labels.ravel().astype(np.int64), "simulated": True})
