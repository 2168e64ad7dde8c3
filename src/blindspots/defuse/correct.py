"""Defuse correction: fine-tune on L(D) + λ·CE(D_f), sweeping λ, selecting by validation accuracy.

D_f holds `n_per` (paper: 256) decoded samples per failure scenario, all labelled with the
scenario's label; a separate `n_per` per scenario form the failure-scenario test set. For each λ
in the paper's list the classifier is fine-tuned from the same starting weights (Adam, lr 1e-3,
batch 256, 3 epochs for MNIST; appendix B.2), keeping the epoch with the best validation accuracy;
an epoch covers the larger of D and D_f (so a small D does not starve D_f of steps);
the λ with the best validation score wins (ties: higher accuracy on D_f itself — never the
scenario test set). The validation score is the accuracy on D's validation split, averaged with the
accuracy on a held-out validation sample of the failure scenarios when one is given (`extra_val`).
The baseline runs the same sweep with individually identified examples (labelled by annotators) in
place of D_f, and a held-out split of them as its extra_val. Each λ's outcome is saved, so a sweep resumes.
"""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm

from blindspots.atomic import write_atomic
from blindspots.defuse.vae import BetaVAE
from blindspots.models.checkpoints import load_state_dict, save_state_dict
from blindspots.scenarios.clustering import Scenarios
from blindspots.scenarios.sampling import sample_codes
from blindspots.training.classification import predict_labels, train_classifier

# The paper's λ sweep (appendix B.2-B.4).
PAPER_LAMBDAS: tuple[float, ...] = (1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 2.0, 5.0,
                                    10.0, 20.0, 100.0, 1000.0)

logger = logging.getLogger(__name__)


@dataclass
class ScenarioData:
    """Fine-tuning set D_f, scenario test set and scenario validation set: images uint8 [n, H, W, C],
    labels int64 [n], scenario int64 [n] (scenario id of each image). The validation set (for choosing
    λ, never for reporting) is empty when `n_val` = 0."""

    finetune_images: np.ndarray
    finetune_labels: np.ndarray
    finetune_scenario: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    test_scenario: np.ndarray
    val_images: np.ndarray | None = None
    val_labels: np.ndarray | None = None
    val_scenario: np.ndarray | None = None

    def save(self, path: str | Path) -> Path:
        """Every array into one compressed .npz at `path` (written atomically); `report_table` reads the
        test arrays back."""
        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:  # a file object: np.savez adds no ".npz" to the temporary name
                np.savez_compressed(fh, **vars(self))

        return write_atomic(path, write)


def scenario_data(scenarios: Scenarios, failures: pd.DataFrame, vae: BetaVAE, *, n_per: int = 256,
                  tau: float = 0.5, seed: int = 0, n_val: int = 64) -> ScenarioData:
    """Sample 2·n_per codes per failure scenario; the first n_per are D_f, the rest the test set;
    plus n_val more per scenario (a separate random stream, so D_f and the test set do not depend
    on n_val) as a validation set for choosing λ.

    failures: the scenario table from `decide_scenarios` (columns scenario, is_failure, label).
    """
    for col in ("scenario", "is_failure", "label"):
        if col not in failures.columns:
            raise ValueError(f"failures: expected a column {col!r}, got {list(failures.columns)}")
    chosen = failures[failures["is_failure"].astype(bool)]
    if chosen.empty:
        raise ValueError("failures: expected at least one failure scenario to correct, got none "
                         "(no scenario had more than rho of its labelled images disagreeing with the classifier)")
    ids = chosen["scenario"].to_numpy(dtype=np.int64)
    labels = dict(zip(ids, chosen["label"].to_numpy(dtype=np.int64)))
    codes, scen = sample_codes(scenarios.means, scenarios.covariances, 2 * n_per, tau=tau, seed=seed, which=ids)
    images = vae.decode(codes)
    first = np.tile(np.r_[np.ones(n_per, bool), np.zeros(n_per, bool)], len(ids))
    y = np.array([labels[s] for s in scen], dtype=np.int64)
    if n_val < 0:
        raise ValueError(f"n_val: expected a non-negative count, got {n_val}")
    vcodes, vscen = sample_codes(scenarios.means, scenarios.covariances, n_val, tau=tau, seed=seed + 7919, which=ids)
    vimages = vae.decode(vcodes) if len(vcodes) else images[:0]
    vy = np.array([labels[s] for s in vscen], dtype=np.int64)
    return ScenarioData(images[first], y[first], scen[first], images[~first], y[~first], scen[~first],
                        vimages, vy, vscen)


@dataclass
class CorrectionResult:
    """sweep: one row per λ (lambda, best_epoch, val_acc, extra_acc, and `<name>_acc` for every
    evaluation set); best_lambda; module: the selected fine-tuned classifier."""

    sweep: pd.DataFrame
    best_lambda: float
    module: nn.Module
    extra: dict = field(default_factory=dict)


def correct(
    module: nn.Module,
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    extra: tuple[np.ndarray, np.ndarray],
    *,
    extra_val: tuple[np.ndarray, np.ndarray] | None = None,
    lambdas: Sequence[float] = PAPER_LAMBDAS,
    epochs: int = 3,
    batch_size: int = 256,
    lr: float = 1e-3,
    epoch_covers: str = "both",
    seed: int = 0,
    evaluate: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    desc: str = "correct",
) -> CorrectionResult:
    """Sweep λ over copies of `module` (left untouched); return the one with the best validation accuracy.

    train, val, extra: (uint8 images [n, H, W, C], int64 labels [n]); extra is D_f (or the baseline's
    identified examples). extra_val: held-out examples like `extra` (for Defuse: `ScenarioData.val_*`),
    or None. Selection score, per epoch and per λ: the validation accuracy on `val`; with extra_val, the
    mean of that and the accuracy on extra_val — correction should keep D right *and* fix the failures
    (the paper's Figure 5: pick the λ where both are high); a 500-image val alone cannot tell λs apart
    (one standard error ≈ 1 point) and would pick by noise. evaluate: more named sets scored for every
    λ (e.g. "test", "scenario"), reported, never used for selection.
    out_dir: per-λ results and weights are saved there and reused on resume.
    epoch_covers: "both" (default) — each epoch passes over the larger of D and D_f, cycling the
    smaller, so D_f is seen in full every epoch even when D has only a few thousand images (the
    paper's MNIST run has 60,000, i.e. 235 steps per epoch); "images" — an epoch is one pass over D.
    """
    if len(lambdas) == 0:
        raise ValueError("lambdas: expected at least one λ, got none")
    if any(l < 0 for l in lambdas):
        raise ValueError(f"lambdas: expected non-negative values, got {list(lambdas)}")
    if len(extra[0]) == 0:
        raise ValueError("extra: expected at least one fine-tuning example (D_f), got 0")
    if extra_val is not None and len(extra_val[0]) == 0:
        extra_val = None
    evaluate = dict(evaluate or {})
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    rows, best, best_key = [], None, None
    for i, lam in enumerate(tqdm(list(lambdas), desc=desc, disable=not progress)):
        row_path = out / f"lambda_{i:02d}.json" if out is not None else None
        state_path = out / f"lambda_{i:02d}.pt" if out is not None else None
        if row_path is not None and row_path.is_file() and state_path.is_file():
            row = json.loads(row_path.read_text())
            if row["lambda"] != float(lam):
                raise ValueError(f"out_dir: expected λ={lam} at position {i} to resume, got {row['lambda']}; "
                                 "use a new out_dir for a different sweep")
            state = None  # loaded lazily only if this λ wins
        else:
            m = copy.deepcopy(module)
            fit = train_classifier(m, train[0], train[1], epochs=epochs, batch_size=batch_size, lr=lr,
                                   optimizer="adam", seed=seed, extra_images=extra[0], extra_labels=extra[1],
                                   extra_weight=float(lam), val_images=val[0], val_labels=val[1], select="val",
                                   epoch_covers=epoch_covers,  # type: ignore[arg-type]
                                   extra_val_images=None if extra_val is None else extra_val[0],
                                   extra_val_labels=None if extra_val is None else extra_val[1],
                                   progress=False, desc=f"λ={lam:g}")
            preds: dict[int, np.ndarray] = {}  # one forward pass per distinct image array
            for data in [val, extra, *([extra_val] if extra_val is not None else []), *evaluate.values()]:
                if id(data[0]) not in preds:
                    preds[id(data[0])] = predict_labels(m, data[0])

            def acc(data: tuple[np.ndarray, np.ndarray]) -> float:
                return float((preds[id(data[0])] == np.asarray(data[1])).mean()) if len(data[1]) else float("nan")

            row = {"lambda": float(lam), "best_epoch": fit.best_epoch, "val_acc": acc(val), "extra_acc": acc(extra)}
            if extra_val is not None:
                row["extra_val_acc"] = acc(extra_val)
            row["select_score"] = (row["val_acc"] + row["extra_val_acc"]) / 2 if extra_val is not None \
                else row["val_acc"]
            row.update({f"{name}_acc": acc(data) for name, data in evaluate.items()})
            state = m.state_dict()
            if row_path is not None:
                save_state_dict(state_path, state)
                row_path.write_text(json.dumps(row))
        rows.append(row)
        key = (row.get("select_score", row["val_acc"]), row["extra_acc"])
        if best_key is None or key > best_key:
            best_key = key
            best = (i, float(lam), state)
        logger.info("%s λ=%g: %s", desc, lam, row)
    i, lam, state = best  # type: ignore[misc]
    if state is None:
        state = load_state_dict(out / f"lambda_{i:02d}.pt")  # type: ignore[operator]
    chosen = copy.deepcopy(module)
    chosen.load_state_dict(state)
    chosen.eval()
    return CorrectionResult(pd.DataFrame(rows), lam, chosen)
