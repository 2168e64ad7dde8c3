"""Defuse, measured honestly: the table that says whether correction helped.

Rows (`ROW_NAMES`, in this order):
- "before": the classifier as trained;
- "control (λ=0)": the same fine-tuning as Defuse with the scenario data weighted to nothing and
  the *same number of optimisation steps* — what extra training alone does;
- "identified examples": the λ sweep with individually identified examples (labelled by voters)
  in place of the scenario samples (the paper's baseline);
- "Defuse": the λ sweep on the failure-scenario samples D_f.
Columns (`COLUMNS`): row, lambda, steps (optimisation steps of the fine-tuning; 0 before),
test_acc (held-out test set), scenario_acc (scenario test samples scored against the scenario's
label — the label Defuse also trains on, so it can flatter), judge_acc (the same samples scored
against an independent judge's label: a classifier the corrected model never saw, in examples a
SIMULATED judge, i.e. a stronger classifier standing in for people).

Per-scenario judge agreement (`judge_agreement`): the fraction of a scenario's test samples the
judge gives the scenario's label; scenarios below `dispute_below` (default 0.5) are flagged
`disputed` — the judge mostly disputes the scenario label — and `flag_disputed` carries the flag
into a review decisions table (column judge_disputed) so people can discard those scenarios.

Public, stable names: ROW_NAMES, COLUMNS, TABLE_FILE, AGREEMENT_FILE, HonestEvaluation,
judge_labels, judge_agreement, flag_disputed, score_row, honest_table, fine_tune_steps, run_control,
run_honest_evaluation, save_evaluation, reconstruction_accuracy, format_table, format_agreement.
Files (`save_evaluation`): honest_table.csv (the rows) and judge_agreement.csv (per scenario);
the Defuse report page (report/pages/defuse.py) shows them when a run folder holds them.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from torch import nn

from blindspots.defuse.correct import PAPER_LAMBDAS, CorrectionResult, ScenarioData, correct
from blindspots.defuse.table import (AGREEMENT_FILE, COLUMNS, ROW_NAMES, TABLE_FILE,  # noqa: F401 - re-exported
                                     format_agreement, format_table)
from blindspots.defuse.vae import BetaVAE
from blindspots.models.adapters import Classifier
from blindspots.training.classification import predict_labels

logger = logging.getLogger(__name__)



@dataclass
class HonestEvaluation:
    """rows: DataFrame with `COLUMNS`, one row per `ROW_NAMES` entry; agreement: per-scenario judge
    agreement (`judge_agreement`) plus `<row>` columns with each row's judge-scored accuracy on that
    scenario; results: the CorrectionResult of each fine-tuned row; settings: how it was made."""

    rows: pd.DataFrame
    agreement: pd.DataFrame
    results: dict[str, CorrectionResult] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)


def _check_pair(data: tuple[np.ndarray, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError(f"{name}: expected (uint8 images [n, H, W, C], int labels [n]), got {type(data).__name__}")
    images, labels = np.asarray(data[0]), np.asarray(data[1])
    if images.dtype != np.uint8 or images.ndim != 4 or labels.shape != (len(images),):
        raise ValueError(f"{name}: expected uint8 images [n, H, W, C] and labels [n], got {images.dtype} "
                         f"{images.shape} and {labels.shape}")
    return images, labels.astype(np.int64)


def judge_labels(judge: Classifier, images: np.ndarray) -> np.ndarray:
    """The judge's class (argmax of predict_proba) for uint8 [n, H, W, C] images -> int64 [n]."""
    if not hasattr(judge, "predict_proba"):
        raise ValueError(f"judge: expected a Classifier with predict_proba, got {type(judge).__name__}")
    if len(images) == 0:
        return np.zeros(0, np.int64)
    proba = np.asarray(judge.predict_proba(images))
    if proba.ndim != 2 or len(proba) != len(images):
        raise ValueError(f"judge: expected probabilities [{len(images)}, K], got shape {proba.shape}")
    return proba.argmax(1).astype(np.int64)


def judge_agreement(scenario: np.ndarray, labels: np.ndarray, judged: np.ndarray, *,
                    class_names: Sequence[str] | None = None, dispute_below: float = 0.5) -> pd.DataFrame:
    """Per scenario: n, label (scenario label), label_name, judge_agreement (fraction of its samples
    the judge labels `label`), judge_top (the judge's most common label), disputed (agreement <
    dispute_below). scenario, labels, judged: int [n] per scenario test sample."""
    scenario, labels, judged = (np.asarray(a, dtype=np.int64) for a in (scenario, labels, judged))
    if not (scenario.shape == labels.shape == judged.shape) or scenario.ndim != 1:
        raise ValueError(f"scenario, labels, judged: expected three int arrays of one shape [n], got "
                         f"{scenario.shape}, {labels.shape}, {judged.shape}")
    if not 0 <= dispute_below <= 1:
        raise ValueError(f"dispute_below: expected a fraction in [0, 1], got {dispute_below}")
    rows = []
    for j in np.unique(scenario):
        m = scenario == j
        lab = int(np.bincount(labels[m]).argmax())
        top = int(np.bincount(judged[m]).argmax())
        agree = float((judged[m] == labels[m]).mean())
        rows.append({"scenario": int(j), "n": int(m.sum()), "label": lab,
                     "label_name": class_names[lab] if class_names is not None else str(lab),
                     "judge_agreement": agree, "judge_top": top,
                     "judge_top_name": class_names[top] if class_names is not None else str(top),
                     "disputed": agree < dispute_below})
    return pd.DataFrame(rows, columns=["scenario", "n", "label", "label_name", "judge_agreement", "judge_top",
                                       "judge_top_name", "disputed"])


def flag_disputed(decisions: pd.DataFrame, agreement: pd.DataFrame) -> pd.DataFrame:
    """A copy of a scenario decisions table (column `scenario`, e.g. from `decide_scenarios`) with
    judge_agreement and judge_disputed columns (NaN / False for scenarios the judge did not score)."""
    if "scenario" not in decisions.columns:
        raise ValueError(f"decisions: expected a 'scenario' column, got {list(decisions.columns)}")
    for col in ("scenario", "judge_agreement", "disputed"):
        if col not in agreement.columns:
            raise ValueError(f"agreement: expected a {col!r} column (from judge_agreement), got {list(agreement.columns)}")
    extra = agreement[["scenario", "judge_agreement", "disputed"]].rename(columns={"disputed": "judge_disputed"})
    out = decisions.drop(columns=[c for c in ("judge_agreement", "judge_disputed") if c in decisions.columns])
    out = out.merge(extra, on="scenario", how="left")
    out["judge_disputed"] = out["judge_disputed"].fillna(False).astype(bool)
    return out


def score_row(name: str, module: nn.Module, *, test: tuple[np.ndarray, np.ndarray], scenario_images: np.ndarray,
              scenario_labels: np.ndarray, judged: np.ndarray, lam: float | None = None, steps: int = 0) -> dict:
    """One table row: accuracies of `module` on the test set, on the scenario test samples against
    their scenario labels and against the judge's labels (`judged`, int [n])."""
    ti, tl = _check_pair(test, "test")
    pred_s = predict_labels(module, scenario_images) if len(scenario_images) else np.zeros(0, np.int64)
    pred_t = predict_labels(module, ti)

    def acc(p: np.ndarray, y: np.ndarray) -> float:
        return float((p == np.asarray(y)).mean()) if len(y) else float("nan")

    return {"row": name, "lambda": np.nan if lam is None else float(lam), "steps": int(steps),
            "test_acc": acc(pred_t, tl), "scenario_acc": acc(pred_s, scenario_labels), "judge_acc": acc(pred_s, judged)}


def honest_table(modules: Mapping[str, nn.Module], *, test: tuple[np.ndarray, np.ndarray], scenario_images: np.ndarray,
                 scenario_labels: np.ndarray, judged: np.ndarray, lambdas: Mapping[str, float] | None = None,
                 steps: Mapping[str, int] | None = None) -> pd.DataFrame:
    """The table (`COLUMNS`) for already fine-tuned modules, keyed by row name (any of ROW_NAMES, in
    that order, then others). scenario_images: uint8 [n, H, W, C] scenario test samples;
    scenario_labels / judged: int [n] their scenario labels / judge labels."""
    if not modules:
        raise ValueError("modules: expected at least one classifier to score, got none")
    scenario_labels, judged = np.asarray(scenario_labels), np.asarray(judged)
    if scenario_labels.shape != (len(scenario_images),) or judged.shape != (len(scenario_images),):
        raise ValueError(f"scenario_labels, judged: expected {len(scenario_images)} labels each, got "
                         f"{scenario_labels.shape}, {judged.shape}")
    order = [n for n in ROW_NAMES if n in modules] + [n for n in modules if n not in ROW_NAMES]
    rows = [score_row(n, modules[n], test=test, scenario_images=scenario_images, scenario_labels=scenario_labels,
                      judged=judged, lam=(lambdas or {}).get(n), steps=(steps or {}).get(n, 0)) for n in order]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def fine_tune_steps(n_train: int, n_extra: int, *, epochs: int, batch_size: int) -> int:
    """Optimisation steps of `correct` with λ > 0 (epoch_covers="both"): an epoch passes over the
    larger of D (n_train) and D_f (n_extra) in batches of `batch_size`."""
    return int(epochs) * -(-max(int(n_train), int(n_extra)) // int(batch_size))


def run_control(module: nn.Module, train: tuple[np.ndarray, np.ndarray], val: tuple[np.ndarray, np.ndarray],
                extra: tuple[np.ndarray, np.ndarray], *, extra_val: tuple[np.ndarray, np.ndarray] | None = None,
                epochs: int = 3, batch_size: int = 256, lr: float = 1e-3, seed: int = 0,
                out_dir: str | Path | None = None, progress: bool = True) -> tuple[CorrectionResult, int]:
    """The λ = 0 control: fine-tune on D alone for as many steps as Defuse makes with D_f = `extra`.

    With λ = 0 the D_f term vanishes and training would make one pass over D per epoch — fewer
    steps than Defuse when D_f is larger than D. D is therefore cycled (tiled, in fresh orders per
    epoch) up to max(|D|, |D_f|) images per epoch, so both see the same number of steps and
    learning-rate updates; the epoch is selected by the same score as Defuse's (validation
    accuracy, averaged with accuracy on extra_val when given). Returns (result, steps).
    """
    ti, tl = _check_pair(train, "train")
    ei, _ = _check_pair(extra, "extra")
    n_target = max(len(ti), len(ei))
    reps = -(-n_target // len(ti))
    rng = np.random.default_rng(seed)
    idx = np.concatenate([rng.permutation(len(ti)) for _ in range(reps)])[:n_target]
    res = correct(module, (ti[idx], tl[idx]), val, extra, extra_val=extra_val, lambdas=[0.0], epochs=epochs,
                  batch_size=batch_size, lr=lr, seed=seed, out_dir=out_dir, progress=progress, desc="control λ=0")
    return res, fine_tune_steps(n_target, 0, epochs=epochs, batch_size=batch_size)


def run_honest_evaluation(
    module: nn.Module,
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    scenarios: ScenarioData,
    identified: tuple[np.ndarray, np.ndarray],
    judge: Classifier,
    *,
    identified_val: tuple[np.ndarray, np.ndarray] | None = None,
    class_names: Sequence[str] | None = None,
    lambdas: Sequence[float] = PAPER_LAMBDAS,
    epochs: int = 3,
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
    dispute_below: float = 0.5,
    out_dir: str | Path | None = None,
    progress: bool = True,
) -> HonestEvaluation:
    """Fine-tune the three rows from the same `module` (left untouched) and score all four.

    train, val, test: (uint8 [n, H, W, C], int [n]) — D, its validation split (selection only) and
    a held-out test set (reported only). scenarios: `scenario_data(...)` (D_f, scenario test and
    validation samples). identified: the baseline's individually identified examples with their
    voted labels; identified_val: held out like them, for choosing the baseline's λ (optional).
    judge: an independent Classifier scoring the scenario test samples (never used for training or
    selection). out_dir: per-row sweeps are saved under it (resumable).
    """
    train, val, test = _check_pair(train, "train"), _check_pair(val, "val"), _check_pair(test, "test")
    identified = _check_pair(identified, "identified")
    if len(scenarios.finetune_images) == 0 or len(scenarios.test_images) == 0:
        raise ValueError("scenarios: expected failure-scenario samples (D_f and a test set), got none")
    out = Path(out_dir) if out_dir is not None else None
    sub = (lambda name: out / name) if out is not None else (lambda name: None)
    d_f = (scenarios.finetune_images, scenarios.finetune_labels)
    s_val = (scenarios.val_images, scenarios.val_labels) if scenarios.val_images is not None else None
    common = dict(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, progress=progress)
    judged = judge_labels(judge, scenarios.test_images)
    # Scored for every λ (Figure 5's trade-off), never used for selection.
    scored = {"test": test, "scenario": (scenarios.test_images, scenarios.test_labels),
              "judge": (scenarios.test_images, judged)}
    defuse = correct(module, train, val, d_f, extra_val=s_val, lambdas=lambdas, out_dir=sub("correct_defuse"),
                     desc="Defuse λ sweep", evaluate=scored, **common)
    baseline = correct(module, train, val, identified, extra_val=identified_val, lambdas=lambdas,
                       out_dir=sub("correct_identified"), desc="identified-examples λ sweep", evaluate=scored,
                       **common)
    control, control_steps = run_control(module, train, val, d_f, extra_val=s_val, out_dir=sub("correct_control"),
                                         **common)
    modules = {"before": module, "control (λ=0)": control.module, "identified examples": baseline.module,
               "Defuse": defuse.module}
    steps = {"control (λ=0)": control_steps,
             "identified examples": fine_tune_steps(len(train[0]), len(identified[0]), epochs=epochs,
                                                    batch_size=batch_size),
             "Defuse": fine_tune_steps(len(train[0]), len(d_f[0]), epochs=epochs, batch_size=batch_size)}
    lams = {"control (λ=0)": 0.0, "identified examples": baseline.best_lambda, "Defuse": defuse.best_lambda}
    rows = honest_table(modules, test=test, scenario_images=scenarios.test_images,
                        scenario_labels=scenarios.test_labels, judged=judged, lambdas=lams, steps=steps)
    agreement = judge_agreement(scenarios.test_scenario, scenarios.test_labels, judged, class_names=class_names,
                                dispute_below=dispute_below)
    for name, m in modules.items():  # per-scenario judge-scored accuracy of every row
        pred = predict_labels(m, scenarios.test_images)
        ok = pd.Series(pred == judged).groupby(scenarios.test_scenario).mean()
        agreement[name] = agreement["scenario"].map(ok).to_numpy()
    settings = {"lambdas": [float(x) for x in lambdas], "epochs": epochs, "batch_size": batch_size, "lr": lr,
                "seed": seed, "dispute_below": dispute_below, "n_train": len(train[0]), "n_finetune": len(d_f[0]),
                "n_identified": len(identified[0]), "n_scenario_test": len(scenarios.test_images)}
    return HonestEvaluation(rows, agreement, {"control (λ=0)": control, "identified examples": baseline,
                                              "Defuse": defuse}, settings)


def save_evaluation(ev: HonestEvaluation, out_dir: str | Path) -> dict[str, Path]:
    """Write out_dir/TABLE_FILE (the rows) and out_dir/AGREEMENT_FILE (per-scenario agreement)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ev.rows.to_csv(out / TABLE_FILE, index=False)
    ev.agreement.to_csv(out / AGREEMENT_FILE, index=False)
    return {"table": out / TABLE_FILE, "agreement": out / AGREEMENT_FILE}


def reconstruction_accuracy(vae: BetaVAE, judge: Classifier, images: np.ndarray, labels: np.ndarray) -> float:
    """The judge's accuracy on the VAE's reconstructions decode(μ(x)) of uint8 [n, H, W, C] images
    with int [n] labels: how often a reconstruction keeps its class (the VAE's fitness for Defuse)."""
    labels = np.asarray(labels)
    if labels.shape != (len(images),) or len(labels) == 0:
        raise ValueError(f"labels: expected {len(images)} labels (one per image, at least one), got {labels.shape}")
    return float((judge_labels(judge, vae.reconstruct(images)) == labels).mean())
