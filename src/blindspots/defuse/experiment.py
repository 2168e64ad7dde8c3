"""The correction experiment of Defuse, end to end: the λ sweep, the λ = 0 control and the
identified-examples baseline, each saved as a classifier checkpoint that records how it was made.

This is the decision logic behind `blindspots defuse correct` (which only parses, calls and prints):
which hold-out chooses λ for the baseline, how many steps each row makes, what each checkpoint's
metadata says. Slack, Rauschmayr and Kenthapadi, "Defuse: Harnessing Unrestricted Adversarial
Examples for Debugging Models Beyond Test Accuracy", arXiv:2102.06162, Section 3.3 (correction).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
from torch import nn

from blindspots.defuse.correct import ScenarioData, correct
from blindspots.defuse.evaluation import fine_tune_steps, run_control
from blindspots.models.classifier_zoo import save_classifier

Pair = tuple[np.ndarray, np.ndarray]  # (uint8 images [n, H, W, C], int64 labels [n])


@dataclass
class Row:
    """One trained row of the experiment: its checkpoint, chosen λ, optimisation steps and sweep."""

    name: str
    path: Path
    best_lambda: float
    steps: int
    sweep: pd.DataFrame
    n_fit: int = 0  # images of its extra set it was fitted on
    n_held: int = 0  # images of its extra set held out to choose λ


@dataclass
class Experiment:
    """What `run_experiment` made: Defuse's row, and the control and baseline rows when run."""

    defuse: Row
    control: Row | None = None
    baseline: Row | None = None
    notes: list[str] = field(default_factory=list)


def baseline_holdout(n_labelled: int, sd: ScenarioData, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(fit positions, held-out positions) of the labelled identified examples.

    The baseline chooses λ on a held-out share of its own labelled examples, in the same proportion
    as Defuse holds out scenario samples (val / (val + fine-tune)); at least one is held out."""
    share = len(sd.val_labels) / max(1, len(sd.val_labels) + len(sd.finetune_labels))
    n_hold = max(1, int(round(n_labelled * share)))
    order = np.random.default_rng(seed).permutation(n_labelled)
    return order[n_hold:], order[:n_hold]


def run_experiment(module: nn.Module, info: dict[str, Any], train: Pair, valid: Pair, sd: ScenarioData, out: Path, *,
                   lambdas: Sequence[float], epochs: int, batch_size: int, seed: int, control: bool = True,
                   labelled: Pair | None = None) -> Experiment:
    """Fine-tune on L(D) + λ·CE(D_f) over `lambdas` and keep the best by validation accuracy; with
    `control`, the λ = 0 row of the same steps; with `labelled` identified examples (>= 2), the
    baseline sweep on them. Checkpoints go to out/{corrected,control,baseline}.pt; resumable
    through each sweep's own folder.

    module: the classifier to correct (left untouched); info: its checkpoint info (arch,
    class_names, image_shape, kwargs); train, valid: D and its held-out validation images;
    sd: the scenario sets (fine-tune, validation, test) sampled from the failure scenarios.
    """
    out.mkdir(parents=True, exist_ok=True)
    fit = dict(epochs=epochs, batch_size=batch_size, seed=seed)
    d_f, s_val = (sd.finetune_images, sd.finetune_labels), (sd.val_images, sd.val_labels)
    scenario_test = {"scenario": (sd.test_images, sd.test_labels)}

    def save(name: str, net: nn.Module, meta: dict[str, Any]) -> Path:
        path = out / name
        save_classifier(path, net, arch=info["arch"], class_names=info["class_names"],
                        image_shape=tuple(info["image_shape"]), kwargs=info["kwargs"], meta=meta)
        return path

    res = correct(module, train, valid, d_f, extra_val=s_val, lambdas=lambdas, out_dir=out / "sweep",
                  desc="Defuse λ sweep", evaluate=scenario_test, **fit)
    res.sweep.to_csv(out / "sweep.csv", index=False)
    steps = fine_tune_steps(len(train[1]), len(sd.finetune_labels), epochs=epochs, batch_size=batch_size)
    path = save("corrected.pt", res.module, {"lambda": res.best_lambda, "steps": steps, "row": "Defuse"})
    exp = Experiment(Row("Defuse", path, res.best_lambda, steps, res.sweep, n_fit=len(sd.finetune_labels)))
    if control:
        # λ = 0 with the same number of steps: what the extra training alone does.
        ctl, ctl_steps = run_control(module, train, valid, d_f, extra_val=s_val, out_dir=out / "control", **fit)
        path = save("control.pt", ctl.module, {"lambda": 0.0, "steps": ctl_steps, "row": "control (λ=0)"})
        exp.control = Row("control (λ=0)", path, 0.0, ctl_steps, ctl.sweep)
    if labelled is not None and len(labelled[1]) >= 2:
        fit_i, hold_i = baseline_holdout(len(labelled[1]), sd, seed)
        base = correct(module, train, valid, (labelled[0][fit_i], labelled[1][fit_i]), lambdas=lambdas,
                       out_dir=out / "baseline", extra_val=(labelled[0][hold_i], labelled[1][hold_i]),
                       desc="identified-examples λ sweep", evaluate=scenario_test, **fit)
        base.sweep.to_csv(out / "baseline_sweep.csv", index=False)
        b_steps = fine_tune_steps(len(train[1]), len(fit_i), epochs=epochs, batch_size=batch_size)
        path = save("baseline.pt", base.module, {"lambda": base.best_lambda, "steps": b_steps,
                                                 "row": "identified examples"})
        exp.baseline = Row("identified examples", path, base.best_lambda, b_steps, base.sweep,
                           n_fit=len(fit_i), n_held=len(hold_i))
    elif labelled is not None:
        exp.notes.append(f"no identified-examples baseline: {len(labelled[1])} labelled identified failure(s), "
                         "at least 2 are needed (one to fit, one to choose λ)")
    return exp
