"""docs/python.md runs as written, from `import blindspots` alone: a scan, MAD picks, surprise columns and
picks, a project round with simulated people, the reports. The page's paths stand for the reader's files:
here a 24-scene pool with its true masks, a small labelled set and two torch factories."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from blindspots.data.scenes import SCENE_CLASSES, generate_scene_set

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, SCENE_CLASSES.num_classes, 1)).eval()


def tiny_target() -> nn.Module:
    """The page's target (`test_docs_python:tiny_target`)."""
    return _net(0)


def tiny_competitor() -> nn.Module:
    return _net(1)


def test_python_page_runs_as_written(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    torch.set_num_threads(1)
    pool = generate_scene_set(tmp_path / "pool", 24, seed=0, distribution="pool", size=48, progress=False)
    generate_scene_set(tmp_path / "labelled", 8, seed=1, distribution="train", size=48, progress=False)
    (code,) = re.findall(r"```python\n(.*?)```", (DOCS / "python.md").read_text(encoding="utf-8"), flags=re.S)
    assert code.splitlines()[0] == "import blindspots"  # the page needs no other import
    for doc, real in {'"runs/own/pool"': repr(str(tmp_path / "pool" / "images")),
                      '"models/target.pt"': '"test_docs_python:tiny_target"',
                      '"models/competitor.pt"': '"test_docs_python:tiny_competitor"',
                      '"runs/own/labelled/images"': repr(str(tmp_path / "labelled" / "images")),
                      '"runs/own/labelled/masks"': repr(str(tmp_path / "labelled" / "masks")),
                      '"runs/own/truth"': repr(str(tmp_path / "pool" / "masks")),
                      '"runs/own/': repr(str(tmp_path)) + ' + "/runs/own/'}.items():
        assert doc in code, f"docs/python.md: expected {doc} in its Python block"
        code = code.replace(doc, real)
    ns: dict = {}
    exec(code, ns)
    out = capsys.readouterr().out
    scan, picks, project, status = ns["scan"], ns["picks"], ns["project"], ns["status"]
    assert len(scan.table) == len(pool.ids) and set(scan.maps(ns["first"])) == {"target", "competitor"}
    assert 0 < len(picks) <= 10 and (tmp_path / "runs/own/mad/index.html").is_file()
    issues = ns["issues"].images  # every pool image has a true mask; the tiny target disagrees with most
    assert sorted(Path(i).stem for i in issues["id"]) == sorted(pool.ids) and list(issues["rank"]) == list(range(1, len(pool.ids) + 1))
    assert (tmp_path / "runs/own/label-issues/images.csv").is_file() and issues["issue_pixels"].sum() > 0
    assert ns["columns"] and all(c.startswith("surprise_mdsa__target") for c in ns["columns"])
    assert set(ns["columns"]) <= set(scan.table.columns) and 0 < len(ns["surprising"]) <= 5
    # the page's claim: no fine-tuning data, so the round exports S ∪ T and says what to do as calls
    assert status.state == "exported", status.message
    assert [a.kind for a in status.next] == ["import_masks", "register_version"]
    assert "next: project.import_masks('FOLDER')" in out and "blindspots " not in status.message
    assert project.journal.step(0, "scan")["result"]["adopted"]  # the project took the scan, did not scan again
    page = Path(project.report())
    assert page.is_file() and (tmp_path / "runs/own/scan/report/index.html").is_file()
    # round 0 exported S ∪ T and waits for masks and the target's next version: it is not finished
    html = page.read_text(encoding="utf-8")
    assert "Round 0 is finished" not in html and "It waits for the target retrained on S(1)" in html


def test_import_blindspots_is_cheap_and_names_the_front_door() -> None:
    code = ("import sys, blindspots; names = set(blindspots.__all__); "
            "print(sorted(m for m in ('torch', 'pandas', 'numpy') if m in sys.modules)); "
            "print(callable(blindspots.scan), sorted(names))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "PATH": ""})
    loaded, front = res.stdout.splitlines()
    assert loaded == "[]"  # nothing heavy until a name is used
    assert front.startswith("True") and all(n in front for n in ("'Project'", "'Scan'", "'open_scan'", "'scan'"))
