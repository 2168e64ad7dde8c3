"""The Python snippets of docs/labels.md, mine.md, report.md and annotation_tools.md run as written.

Each ```python block is taken from the page and executed with only the names the page leaves to
the reader bound (labels, pred_probs, names; a pool folder, models, a scan, failure ids); paths
that stand for the reader's files are replaced by small real ones. A renamed function, a changed
signature or a different return type makes the page fail here.
"""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

matplotlib.use("Agg")

DOCS = Path(__file__).resolve().parents[1] / "docs"


def python_blocks(page: str) -> list[str]:
    """The ```python blocks of docs/<page>, in order."""
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, f"docs/{page}: expected ```python blocks, got none"
    return blocks


def _net(seed: int, classes: int = 8) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, classes, 1)).eval()


def tiny_target() -> nn.Module:
    """A torch factory for the model specs below (`test_docs_snippets:tiny_target`)."""
    return _net(0)


def tiny_competitor() -> nn.Module:
    return _net(1)


def test_labels_page_snippet_runs_as_written(capsys):
    rng = np.random.default_rng(0)
    n, k, h, w = 3, 3, 12, 16
    labels = rng.integers(0, k, (n, h, w))
    pred_probs = rng.dirichlet(np.ones(k), (n, h, w)).transpose(0, 3, 1, 2)
    ns = {"labels": labels, "pred_probs": pred_probs, "names": ["road", "car", "sky"]}
    exec(python_blocks("labels.md")[0], ns)
    assert ns["issues"].dtype == bool and ns["issues"].shape == (n, h, w)  # "bool [N, H, W]"
    assert ns["car"].shape == (n, h, w)
    assert ns["image_scores"].shape == (n,) and ns["pixel_scores"].shape == (n, h, w)
    assert set(ns["worst"]) <= set(range(n))
    assert "Total number of examples whose labels have been evaluated" in capsys.readouterr().out


@pytest.fixture(scope="module")
def scanned(tmp_path_factory) -> dict[str, Path]:
    """docs/mine.md's Python block on a 24-scene pool with two torch factories instead of ONNX files."""
    from blindspots.data.scenes.generate import generate_scene_set

    root = tmp_path_factory.mktemp("minedoc")
    generate_scene_set(root / "scenes", 24, seed=0, distribution="pool", size=48, progress=False)
    code = python_blocks("mine.md")[0]
    for doc, real in {'"photos"': repr(str(root / "scenes" / "images")),
                      '"models/my_model.onnx"': '"test_docs_snippets:tiny_target"',
                      '"models/deeplab.onnx"': '"test_docs_snippets:tiny_competitor"',
                      '"runs/': repr(str(root)) + ' + "/runs/'}.items():
        assert doc in code, f"docs/mine.md: expected {doc} in its Python block"
        code = code.replace(doc, real)
    ns: dict = {}
    exec(code, ns)
    return {"root": root, "scan": root / "runs" / "scan", "mad": root / "runs" / "mad", "ns": ns}


def test_mine_page_snippet_runs_as_written(scanned):
    picks, ns = scanned["ns"]["picks"], scanned["ns"]
    assert list(picks.columns[:6]) == ["rank", "id", "score", "reason", "details", "content_hash"]
    assert 0 < len(picks) <= 20 and list(picks["rank"]) == list(range(1, len(picks) + 1))
    assert {"picks.csv", "picks.parquet", "index.html", "thumbs"} <= {p.name for p in scanned["mad"].iterdir()}
    assert set(ns["sampler_names"]()) >= {"mad", "entropy", "surprise", "random", "scenario"}


def test_report_page_scenario_snippets_run_as_written(scanned, capsys):
    from blindspots.scan import read_score_table

    scan_dir = str(scanned["scan"])
    table = read_score_table(scan_dir)
    failure_ids = list(table["id"][:10])
    first, second = python_blocks("report.md")[-2:]  # the scenario section (the first block needs a demo project)
    ns = {"scan_dir": scan_dir, "failure_ids": failure_ids}
    exec(first, ns)
    assert list(ns["found"].to_frame().columns) == ["scenario", "size", "description", "typical"]
    assert "scenario" in capsys.readouterr().out
    ns["score_table"] = table
    exec(second, ns)
    assert len(ns["picks"]) and not set(ns["picks"]["id"]) & set(failure_ids)


def test_annotation_tools_page_snippets_run_as_written(tmp_path, monkeypatch):
    """docs/annotation_tools.md: export for Label Studio under a document root, then import the export."""
    import json

    from blindspots.data.classes import Classes

    monkeypatch.chdir(tmp_path)
    (tmp_path / "home" / "me" / "photos" / "street").mkdir(parents=True)
    classes = Classes(names=("background", "car", "person"))
    rng = np.random.default_rng(0)
    masks = {"street/cat.jpg": rng.integers(0, 3, (6, 8)).astype(np.uint8), "dog.png": np.ones((5, 5), np.uint8)}
    export, imp = python_blocks("annotation_tools.md")
    for doc in ('"/home/me/photos"', '"/home/me"'):
        assert doc in export, f"docs/annotation_tools.md: expected {doc} in its export block"
    export = export.replace('"/home/me', '"' + str(tmp_path / "home" / "me"))
    exec(export, {"masks": masks, "classes": classes})
    tasks = json.loads((tmp_path / "s.json").read_text())
    assert {t["data"]["image"] for t in tasks} == {"/data/local-files/?d=photos/street/cat.jpg",
                                                   "/data/local-files/?d=photos/dog.png"}
    for t in tasks:  # an annotator accepts the pre-annotation as it is
        t["annotations"] = [{"result": t["predictions"][0]["result"], "was_cancelled": False}]
    assert '"project-1-at-2026-01-01.json"' in imp
    (tmp_path / "project-1-at-2026-01-01.json").write_text(json.dumps(tasks))
    ns = {"classes": classes, "expected_ids": list(masks)}
    exec(imp, ns)
    for k, m in masks.items():
        np.testing.assert_array_equal(ns["masks"][k], m)
