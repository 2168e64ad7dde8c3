"""The honest table (`ReviewFolder.honest_table`, what `blindspots defuse report` prints), from the files
`defuse correct` wrote.

Rows (defuse.evaluation.ROW_NAMES): the classifier before correction, the λ = 0 control
(control.pt), the identified-examples baseline (baseline.pt) and Defuse (corrected.pt); columns:
test accuracy, failure-scenario accuracy against the scenario labels, and against an independent
judge (a classifier; a SIMULATION of people). The computing and formatting is
defuse.evaluation's; this module only finds the models and the scenario test samples.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from blindspots.data.classsets import ClassificationSet
from blindspots.defuse.evaluation import format_agreement, format_table, honest_table, judge_agreement, judge_labels
from blindspots.human.simulate_votes import STRONG_JUDGE, oracle_accuracy
from blindspots.models.checkpoints import load_weights
from blindspots.models.classifier_zoo import load_classifier, load_classifier_module
from blindspots.training.classification import accuracy, predict_labels

#: checkpoint in the `correct` folder -> table row (the classifier itself is "before")
FILES = {"control.pt": "control (λ=0)", "baseline.pt": "identified examples", "corrected.pt": "Defuse"}
JUDGE_NAME = "judge, simulated"


def report_table(classifier: Path, correct_dir: Path, test: ClassificationSet,
                 judge: Path) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(table rows, per-scenario judge agreement, printable text) for the models that exist.

    test: a ClassificationSet the models never saw; judge: a classifier checkpoint.
    """
    sets = correct_dir / "scenario_sets.npz"
    if not sets.is_file():
        raise ValueError(f"correct: expected scenario_sets.npz from `defuse correct` in {str(correct_dir)!r}, got none")
    with np.load(sets) as z:
        s_images, s_labels, s_scen = z["test_images"], z["test_labels"], z["test_scenario"]
    before, info = load_classifier_module(classifier)
    modules, lambdas, steps = {"before": before}, {}, {}
    for file, row in FILES.items():
        if (correct_dir / file).is_file():
            module, meta = load_classifier_module(correct_dir / file)
            modules[row] = module
            lambdas[row] = meta["meta"].get("lambda")
            steps[row] = int(meta["meta"].get("steps", 0))
    judge_clf = load_classifier(judge)
    judged = judge_labels(judge_clf, s_images)
    judge_test = oracle_accuracy(judge_clf, test.images, test.labels)
    rows = honest_table(modules, test=(test.images, test.labels), scenario_images=s_images, scenario_labels=s_labels,
                        judged=judged, lambdas=lambdas, steps=steps)
    agreement = judge_agreement(s_scen, s_labels, judged, class_names=info["class_names"])
    for name, m in modules.items():  # each row's judge-scored accuracy per scenario
        ok = pd.Series(predict_labels(m, s_images) == judged).groupby(s_scen).mean()
        agreement[name] = agreement["scenario"].map(ok).to_numpy()
    validation = correct_dir / "validation.txt"
    text = "\n".join([
        format_table(rows, judge_name=JUDGE_NAME),
        f"test: {len(test)} images; scenario: {len(s_labels)} held-out samples of the failure scenarios, scored "
        "against their voted label (also Defuse's training label) and against the judge, a SIMULATION (a "
        f"classifier standing in for people) that agrees with the scenario labels on "
        f"{100 * float((judged == s_labels).mean()):.1f}% of them",
        f"judge test accuracy: {100 * judge_test:.1f}% "
        + ("(a strong judge)" if judge_test >= STRONG_JUDGE else
           f"(below the {100 * STRONG_JUDGE:.0f}% a judge should reach: its column is weak evidence)"),
        *([validation.read_text().strip()] if validation.is_file() else []),
        "",
        format_agreement(agreement, judge_name="judge"),
    ])
    return rows, agreement, text


def sweep_test_accuracy(sweep: pd.DataFrame, classifier: Path, folder: Path,
                        test: ClassificationSet | None) -> pd.DataFrame:
    """`sweep` sorted by λ, with test_acc per λ from the saved weights in `folder` when it lacks one."""
    sweep = sweep.copy()
    if "test_acc" not in sweep.columns and test is not None:
        accs = []
        for i in range(len(sweep)):  # row i of the sweep was saved as lambda_{i:02d}.pt
            m = load_weights(load_classifier_module(classifier)[0], folder / f"lambda_{i:02d}.pt")
            accs.append(accuracy(m, test.images, test.labels))
        sweep["test_acc"] = accs
    return sweep.sort_values("lambda", kind="stable").reset_index(drop=True)
