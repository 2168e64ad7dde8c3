"""The table `blindspots defuse report` prints: before / λ = 0 control / identified examples / Defuse.

Columns: test accuracy (on --test), failure-scenario accuracy scored against the scenario labels
(people's majority votes — also Defuse's training labels, so it can flatter Defuse), and the same
samples scored against an independent judge (a SIMULATION: another classifier's predictions).
Reads the files `correct` writes: corrected.pt, control.pt, baseline.pt, scenario_sets.npz.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

#: (row name, checkpoint in the correct folder; None = the classifier before correction)
ROWS = (("before", None), ("control (λ = 0, same steps)", "control.pt"),
        ("identified examples", "baseline.pt"), ("Defuse", "corrected.pt"))


def honest_table(classifier: Path, correct_dir: Path, test, judge: Optional[Path]) -> pd.DataFrame:
    """One row per model that exists; accuracies in 0..1 (NaN where a set is missing).

    test: a ClassificationSet or None. Returns columns row, lambda, test_acc, scenario_acc, judge_acc,
    with the printable text in `.attrs["text"]`.
    """
    from blindspots.models.classifier_zoo import load_classifier_module
    from blindspots.training.classification import predict_labels

    sets = correct_dir / "scenario_sets.npz"
    if not sets.is_file():
        raise ValueError(f"correct: expected scenario_sets.npz from `defuse correct` in {str(correct_dir)!r}, got none")
    with np.load(sets) as z:
        s_images, s_labels = z["test_images"], z["test_labels"]
    judged = predict_labels(load_classifier_module(judge)[0], s_images) if judge is not None else None
    rows = []
    for name, file in ROWS:
        path = classifier if file is None else correct_dir / file
        if not path.is_file():
            continue
        module, info = load_classifier_module(path)
        s_pred = predict_labels(module, s_images)
        rows.append({"row": name, "lambda": (info.get("meta") or {}).get("lambda", np.nan),
                     "test_acc": _acc(predict_labels(module, test.images), test.labels) if test is not None else np.nan,
                     "scenario_acc": _acc(s_pred, s_labels),
                     "judge_acc": _acc(s_pred, judged) if judged is not None else np.nan})
    table = pd.DataFrame(rows)
    table.attrs["text"] = format_rows(table, n_scenario=len(s_labels), judged=judged is not None,
                                      judge_agrees=_acc(judged, s_labels) if judged is not None else np.nan)
    return table


def _acc(pred: np.ndarray, labels: np.ndarray) -> float:
    return float((np.asarray(pred) == np.asarray(labels)).mean()) if len(labels) else float("nan")


def format_rows(table: pd.DataFrame, *, n_scenario: int, judged: bool, judge_agrees: float) -> str:
    """Plain-text table, accuracies in percent, '-' where not measured, with a note on each column."""
    def pct(v: float) -> str:
        return "-" if not np.isfinite(v) else f"{100 * v:.1f}"

    head = f"{'':32s} {'test acc':>9s} {'scenario acc':>13s} {'scenario acc':>13s}"
    sub = f"{'':32s} {'':>9s} {'(label)':>13s} {'(judge)':>13s}"
    lines = [head, sub]
    for r in table.itertuples(index=False):
        name = r.row + (f" (λ = {r[1]:g})" if np.isfinite(r[1]) and r.row != "before" and "control" not in r.row else "")
        lines.append(f"{name:32s} {pct(r.test_acc):>9s} {pct(r.scenario_acc):>13s} {pct(r.judge_acc):>13s}")
    lines.append(f"scenario acc: {n_scenario} held-out samples of the failure scenarios; (label) scores them against "
                 "the scenario's voted label (also Defuse's training label)")
    if judged:
        lines.append(f"(judge) scores them against an independent judge — a SIMULATION, not people; the judge agrees "
                     f"with the scenario labels on {100 * judge_agrees:.1f}% of them")
    else:
        lines.append("(judge): not measured; pass --judge CLASSIFIER.pt")
    return "\n".join(lines)


def sweep_test_accuracy(sweep: pd.DataFrame, classifier: Path, folder: Path, test) -> pd.DataFrame:
    """`sweep` sorted by λ, with test_acc per λ from the saved weights in `folder` when it lacks one."""
    from blindspots.models.checkpoints import load_weights
    from blindspots.models.classifier_zoo import load_classifier_module
    from blindspots.training.classification import accuracy

    sweep = sweep.copy()
    if "test_acc" not in sweep.columns and test is not None:
        accs = []
        for i in range(len(sweep)):  # row i of the sweep was saved as lambda_{i:02d}.pt
            m = load_weights(load_classifier_module(classifier)[0], folder / f"lambda_{i:02d}.pt")
            accs.append(accuracy(m, test.images, test.labels))
        sweep["test_acc"] = accs
    return sweep.sort_values("lambda", kind="stable").reset_index(drop=True)
