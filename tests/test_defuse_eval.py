"""Honest Defuse evaluation: all rows and columns, the λ = 0 control's step count, judge agreement."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from blindspots.data.classsets import load_sklearn_digits
from blindspots.defuse.correct import ScenarioData, correct
from blindspots.defuse.evaluation import (COLUMNS, ROW_NAMES, flag_disputed, format_agreement, format_table,
                                          judge_agreement, run_control, run_honest_evaluation)
from blindspots.models.classifier_zoo import as_classifier, build_classifier

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def parts():
    d = load_sklearn_digits()
    train, val, test, scen = d.split([100, 60, 80, 240], seed=0)
    torch.manual_seed(0)
    net = build_classifier("defuse_cnn", 10, d.image_shape, width=4, hidden=16)
    # D_f (150) larger than D (100): the control must cycle D to match Defuse's step count.
    sd = ScenarioData(scen.images[:150], scen.labels[:150], scen.labels[:150] % 3,
                      scen.images[150:210], scen.labels[150:210], scen.labels[150:210] % 3,
                      scen.images[210:], scen.labels[210:], scen.labels[210:] % 3)
    return net, train, val, test, sd


class CountSteps:
    """Counts Adam.step calls while active."""

    def __init__(self, monkeypatch):
        self.n = 0
        orig = torch.optim.Adam.step

        def step(opt, *a, **k):
            self.n += 1
            return orig(opt, *a, **k)
        monkeypatch.setattr(torch.optim.Adam, "step", step)


def test_control_makes_as_many_steps_as_defuse(parts, monkeypatch):
    net, train, val, _, sd = parts
    counter = CountSteps(monkeypatch)
    kw = dict(epochs=2, batch_size=32, progress=False)
    correct(net, (train.images, train.labels), (val.images, val.labels), (sd.finetune_images, sd.finetune_labels),
            lambdas=[1.0], **kw)
    n_defuse, counter.n = counter.n, 0
    res, steps = run_control(net, (train.images, train.labels), (val.images, val.labels),
                             (sd.finetune_images, sd.finetune_labels), **kw)
    assert counter.n == n_defuse == steps == 2 * 5  # 2 epochs x ceil(150 / 32)
    assert res.best_lambda == 0.0


def test_table_has_all_rows_and_columns(parts):
    net, train, val, test, sd = parts
    judge = as_classifier(net, 10)  # any independent classifier will do for the shape of the table
    ev = run_honest_evaluation(net, (train.images, train.labels), (val.images, val.labels), (test.images, test.labels),
                               sd, (sd.finetune_images[:100], sd.finetune_labels[:100]), judge,
                               class_names=[str(i) for i in range(10)], lambdas=[0.1, 1.0], epochs=1,
                               batch_size=32, progress=False)
    assert list(ev.rows.columns) == list(COLUMNS) and list(ev.rows["row"]) == list(ROW_NAMES)
    steps = ev.rows.set_index("row")["steps"]
    assert steps["control (λ=0)"] == steps["Defuse"] > 0 and steps["before"] == 0
    assert ev.rows[["test_acc", "scenario_acc", "judge_acc"]].notna().all().all()
    assert set(ev.agreement["scenario"]) == {0, 1, 2} and set(ROW_NAMES) <= set(ev.agreement.columns)
    text = format_table(ev.rows, judge_name="simulated judge")
    for name in ROW_NAMES:
        assert name in text
    assert "scenario (simulated judge)" in text
    with pytest.raises(ValueError, match="rows: expected columns"):
        format_table(ev.rows.drop(columns=["judge_acc"]))


def test_judge_agreement_flags_disputed_scenarios():
    scen = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    labels = np.array([3, 3, 3, 3, 5, 5, 5, 5])
    judged = np.array([3, 3, 3, 1, 2, 2, 2, 5])
    ag = judge_agreement(scen, labels, judged, class_names=[f"c{i}" for i in range(6)])
    assert ag["judge_agreement"].tolist() == [0.75, 0.25]
    assert ag["disputed"].tolist() == [False, True] and ag["judge_top_name"].tolist() == ["c3", "c2"]
    decisions = pd.DataFrame({"scenario": [0, 1, 2], "is_failure": [True, True, False]})
    flagged = flag_disputed(decisions, ag)
    assert flagged["judge_disputed"].tolist() == [False, True, False]
    assert "DISPUTED" in format_agreement(ag)
    with pytest.raises(ValueError, match="scenario, labels, judged"):
        judge_agreement(scen, labels[:3], judged)


def test_saved_table_shows_on_the_report_page(tmp_path):
    from blindspots.defuse.evaluation import HonestEvaluation, save_evaluation
    from blindspots.report.pages.defuse import write_defuse_report

    rows = pd.DataFrame([{"row": n, "lambda": np.nan if i < 1 else 1.0, "steps": 10 * i, "test_acc": 0.9,
                          "scenario_acc": 0.5, "judge_acc": 0.4} for i, n in enumerate(ROW_NAMES)])
    ag = judge_agreement(np.array([0, 0, 1]), np.array([1, 1, 2]), np.array([1, 0, 0]))
    run = tmp_path / "run"
    save_evaluation(HonestEvaluation(rows, ag), run)
    pd.DataFrame({"lambda": [1.0], "val_acc": [0.9]}).to_csv(run / "sweep.csv", index=False)
    html = write_defuse_report(run, tmp_path / "page").read_text()
    assert "Measured honestly" in html and "control (λ=0)" in html and "disputed" in html


def test_table_written_by_defuse_report_cli_shows_on_the_report_page(tmp_path):
    """`blindspots defuse report --out DIR` writes DIR/table.csv and DIR/judge_agreement.csv beside its
    figures (not save_evaluation's honest_table.csv); the page showed no table for such a run."""
    from blindspots.report.pages.defuse import find_defuse_parts, write_defuse_report

    rows = pd.DataFrame([{"row": n, "lambda": np.nan if i < 1 else 1.0, "steps": 10 * i, "test_acc": 0.9,
                          "scenario_acc": 0.5, "judge_acc": 0.4} for i, n in enumerate(ROW_NAMES)])
    ag = judge_agreement(np.array([0, 0, 1]), np.array([1, 1, 2]), np.array([1, 0, 0]))
    run = tmp_path / "run"
    (run / "correct").mkdir(parents=True)
    pd.DataFrame({"lambda": [1.0], "val_acc": [0.9]}).to_csv(run / "correct" / "sweep.csv", index=False)
    figures = run / "report"
    figures.mkdir()
    (figures / "fig2_tsne.png").write_bytes(b"")  # `defuse report` writes its figures and the table together
    rows.to_csv(figures / "table.csv", index=False)  # as cli/defuse.py `report` writes them
    ag.to_csv(figures / "judge_agreement.csv", index=False)
    assert find_defuse_parts(run)["honest"] == figures
    html = write_defuse_report(run, tmp_path / "page").read_text()
    assert "Measured honestly" in html and "control (λ=0)" in html and "disputed" in html
    summary = json.loads((tmp_path / "page" / "summary.json").read_text())
    assert [r["row"] for r in summary["honest_table"]] == list(ROW_NAMES)


def test_a_stray_table_csv_is_not_taken_for_the_honest_table(tmp_path):
    from blindspots.report.pages.defuse import find_defuse_parts

    run = tmp_path / "run"
    run.mkdir()
    pd.DataFrame({"lambda": [1.0], "val_acc": [0.9]}).to_csv(run / "sweep.csv", index=False)
    pd.DataFrame({"a": [1]}).to_csv(run / "table.csv", index=False)  # no judge_agreement.csv beside it
    assert "honest" not in find_defuse_parts(run)


def test_agreement_text_names_every_row_whole_above_its_column():
    """The per-row columns were headed by names cut to 12 characters ("control (λ=0", "identified e")."""
    ag = judge_agreement(np.array([0, 0, 1]), np.array([1, 1, 2]), np.array([1, 0, 0]))
    for i, name in enumerate(ROW_NAMES):
        ag[name] = [0.5 + 0.1 * i, 0.25]
    head, first = format_agreement(ag).splitlines()[:2]
    for i, name in enumerate(ROW_NAMES):
        assert name in head, (name, head)
        end = head.index(name) + len(name)  # each value ends under the end of its row's name
        assert first[:end].endswith(f"{100 * (0.5 + 0.1 * i):.1f}"), (name, head, first)
