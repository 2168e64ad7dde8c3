"""`blindspots report` on a Defuse run folder and on a label-issues folder: offline pages whose images exist."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from blindspots.cli import app
from blindspots.defuse.grids import save_grid
from blindspots.defuse.plots import plot_scenario_grids, plot_tradeoff
from blindspots.report.pages.defuse import find_defuse_parts, write_defuse_report
from blindspots.report.pages.label_issues import write_label_issues_report
from blindspots.scenarios.review_set import ReviewSet, decide_scenarios, export_review
from test_labels_cli import _write_set
from test_rounds import make_config, world  # noqa: F401  (the module-scoped scenes + models fixture)


def _check_offline(index: Path) -> str:
    text = index.read_text(encoding="utf-8")
    assert "http" not in text
    srcs = re.findall(r'<img src="([^"]+)"', text)
    assert srcs
    for s in srcs:
        assert (index.parent / s).is_file(), s
    return text


def defuse_run(root: Path) -> Path:
    """The outputs of export-review, import-votes, correct and report (tiny, written by the real writers)."""
    rng = np.random.default_rng(0)
    n, names = 6, tuple(str(k) for k in range(10))
    items = pd.DataFrame({"item_id": [f"s{j:03d}-{i:03d}" for j in (0, 1) for i in range(3)],
                          "scenario": [0, 0, 0, 1, 1, 1], "prediction": [3, 3, 3, 5, 5, 5]})
    images = rng.integers(0, 255, (n, 8, 8, 1), dtype=np.uint8)
    rs = ReviewSet(items, images, rng.normal(size=(n, 4)).astype(np.float32), names)
    export_review(rs, root / "rev")
    # People vote 8 on scenario 0 (a failure) and agree with the classifier on scenario 1.
    votes = pd.DataFrame([{"item_id": r.item_id, "annotator": f"p{k}", "label": 8 if r.scenario == 0 else 5}
                          for r in items.itertuples() for k in range(3)])
    dec, voted = decide_scenarios(rs, votes)
    dec.to_csv(root / "rev" / "decisions.csv", index=False)
    voted.to_csv(root / "rev" / "items_voted.csv", index=False)
    (root / "cor").mkdir()
    sweep = pd.DataFrame({"lambda": [1e-10, 10.0], "best_epoch": [0, 0], "val_acc": [0.9, 0.85],
                          "extra_acc": [0.1, 0.9], "extra_val_acc": [0.1, 0.8], "select_score": [0.5, 0.825],
                          "scenario_acc": [0.1, 0.7], "test_acc": [0.9, 0.86]})
    sweep.to_csv(root / "cor" / "sweep.csv", index=False)
    plot_scenario_grids(images[:3], items["prediction"].to_numpy()[:3], items["scenario"].to_numpy()[:3],
                        root / "fig" / "fig3_scenarios.png", labels={0: "8"})
    plot_tradeoff({"Defuse": sweep}, root / "fig" / "fig5_tradeoff.png")
    save_grid(images, root / "grids" / "samples.png", 3)
    return root


def test_defuse_report(tmp_path):
    root = defuse_run(tmp_path / "run")
    assert set(find_defuse_parts(root)) == {"review", "correct", "figures", "grids"}
    res = CliRunner().invoke(app, ["report", str(root)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    index = root / "report" / "index.html"
    assert str(index) in res.output
    text = _check_offline(index)
    assert "Scenario 0: 8" in text and "Scenario 1:" not in text  # only the failure scenario's images
    assert "fig3_scenarios.png" in text and "fig5_tradeoff.png" in text and "vae_samples.png" in text
    assert "Chosen λ = 10" in text
    assert len(list((root / "report" / "figures" / "review").glob("*.png"))) == 3


def test_defuse_report_partial_and_errors(tmp_path):
    root = defuse_run(tmp_path / "run")
    (root / "rev" / "decisions.csv").unlink()
    index = write_defuse_report(root / "rev", tmp_path / "out")
    assert "no votes imported yet" in index.read_text(encoding="utf-8")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="root"):
        write_defuse_report(tmp_path / "empty", tmp_path / "out2")


def label_issues_run(tmp_path: Path, out: Path) -> Path:
    """A real `blindspots label-issues --out` folder (toy model, 3 tiny images) at `out`."""
    _write_set(tmp_path)
    res = CliRunner().invoke(app, ["label-issues", "--images", str(tmp_path / "images"), "--masks",
                                   str(tmp_path / "masks"), "--model", "test_labels_cli:toy_model?num_classes=3",
                                   "--out", str(out), "--no-progress", "--min-area", "4", "--top", "3"])
    assert res.exit_code == 0, res.output
    return out


def test_label_issues_report(tmp_path):
    out = label_issues_run(tmp_path, tmp_path / "issues")
    res = CliRunner().invoke(app, ["report", str(out), "-o", str(tmp_path / "page")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    text = _check_offline(tmp_path / "page" / "index.html")
    assert "worst.png" in text and "img2" in text and "missing" in text
    with pytest.raises(ValueError, match="root"):
        write_label_issues_report(tmp_path / "images", tmp_path / "x")


def surprise_run(root: Path) -> Path:
    """A `surprise analyze --out` folder (table3.csv, figure9.*) with one `surprise view` panel in view/."""
    from blindspots.defuse.grids import save_grid as save_panel
    from blindspots.surprise.analysis import label_saving_tradeoff, plot_label_saving, spearman_table

    rng = np.random.default_rng(0)
    sa, iou = rng.random((12, 2)), rng.random((12, 2))
    root.mkdir(parents=True)
    spearman_table({"LSA": sa}, iou, ["road", "car"]).to_csv(root / "table3.csv", index=False)
    curves = {"road": label_saving_tradeoff(sa[:, 0], iou[:, 0])}
    pd.concat([df.assign(group=k) for k, df in curves.items()]).to_csv(root / "figure9.csv", index=False)
    plot_label_saving(curves).savefig(root / "figure9.png", dpi=40)
    save_panel(rng.integers(0, 255, (2, 8, 8, 3), dtype=np.uint8), root / "view" / "frame0.png", 2)
    return root


def test_surprise_report(tmp_path):
    root = surprise_run(tmp_path / "sa")
    res = CliRunner().invoke(app, ["report", str(root)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    text = _check_offline(root / "report" / "index.html")
    assert "figure9.png" in text and "view_frame0.png" in text and "road" in text
    res = CliRunner().invoke(app, ["report", str(root), "--round", "1"])
    assert res.exit_code == 2 and "--round" in res.output


def test_round_page_engine_sections(world, tmp_path):  # noqa: F811
    """Engine outputs inside the project folder become sections of the round page (one level down),
    their figures copied beside it; the standalone pages stay."""
    from blindspots.loop.project import Project
    from blindspots.report import write_round_report
    from blindspots.report.pages.engine_sections import find_engine_runs

    p = Project.create(tmp_path / "p", make_config(world))
    html = write_round_report(p, out_dir=tmp_path / "bare").read_text(encoding="utf-8")
    assert "Label issues" not in html and "Defuse" not in html
    label_issues_run(tmp_path, p.path / "label-issues")
    surprise_run(p.path / "engines" / "surprise")
    defuse_run(p.path / "engines" / "defuse")
    from blindspots.defuse.evaluation import ROW_NAMES, HonestEvaluation, judge_agreement, save_evaluation

    rows = pd.DataFrame([{"row": r, "lambda": np.nan if i < 1 else 1.0, "steps": 10 * i, "test_acc": 0.9,
                          "scenario_acc": 0.5, "judge_acc": 0.4} for i, r in enumerate(ROW_NAMES)])
    agreement = judge_agreement(np.array([0, 0, 1]), np.array([1, 1, 2]), np.array([1, 0, 0]))
    save_evaluation(HonestEvaluation(rows, agreement), p.path / "engines" / "defuse" / "eval")
    assert [e for e, _ in find_engine_runs(p.path)] == ["labels", "defuse", "surprise"]
    index = write_round_report(p, out_dir=tmp_path / "page")
    text = _check_offline(index)
    for s in ("Label issues: label-issues", "Surprise adequacy: surprise", "Defuse failure scenarios: defuse",
              "Images with the worst label quality", "Table 3: surprise vs IoU", "Figure 4 table",
              "Scenario 0: 8", "Chosen λ = 10", 'href="#labels-0"', 'id="surprise-2-heatmaps"',
              'id="defuse-1-honest"', "control (λ=0)", "identified examples"):
        assert s in text, s
    for f in ("labels-0/worst.png", "surprise-2/figure9.png", "surprise-2/heatmaps/view_frame0.png",
              "defuse-1/fig5_tradeoff.png", "defuse-1/vae_samples.png"):
        assert (index.parent / "figures" / f).is_file(), f
    assert [r["engine"] for r in json.loads((index.parent / "summary.json").read_text())["engines"]] == \
        ["labels", "defuse", "surprise"]
