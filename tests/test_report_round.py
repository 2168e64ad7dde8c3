"""The round page at every stage of a project: new, waiting for ratings, finished (simulated humans);
every link is relative and present, and each section says what is not there yet."""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
import torch
from typer.testing import CliRunner

from blindspots import loop
from blindspots.loop.project import Project
from blindspots.report import write_round_report
from blindspots.report.pages.round import round_scenarios
from test_rounds import make_config, world  # noqa: F401  (the module-scoped scenes + models fixture)

torch.set_num_threads(1)


def links_ok(index: Path) -> str:
    html = index.read_text()
    for src in re.findall(r'(?:src|href)="([^"#]+)"', html):
        assert not src.startswith(("/", "http", "file:")) and (index.parent / unquote(src)).is_file(), src
    return html


def test_round_page_at_every_stage(world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    p = Project.create(tmp_path / "p", make_config(world))
    html = links_ok(write_round_report(p, out_dir=tmp_path / "new"))
    assert "No round has been evaluated yet" in html and "Nothing mined in this round yet" in html
    assert "Ranking stability" in html and "no test set T in this round yet" in html

    st = loop.advance(p, simulate=False, progress=False)  # stops waiting for ratings
    assert not st.finished
    html = links_ok(write_round_report(p, out_dir=tmp_path / "waiting"))
    assert "not rated yet" in html and "No ratings yet" in html and "candidates M(1)" in html

    assert loop.advance(p, simulate=True, progress=False).finished
    index = write_round_report(p, 0)
    assert index == p.reports_dir / "html" / "round-0" / "index.html"
    html = links_ok(index)
    assert "MOS " in html and "Picked because" in html and "target_v1" in html
    assert "IoU change" in html or "per-class IoU change" in html
    for name in ("mos.png", "class_iou_change.png"):
        assert (index.parent / "figures" / name).is_file()
    assert "target" in (index.parent / "table1.csv").read_text()
    assert "Ranking stability on T(1)" in html and "Not available" not in html.split('id="stability"')[1].split("<h2")[0], html
    assert (index.parent / "figures" / "ranking_stability.png").is_file()
    assert "Rater agreement" in html and "span at most 1" in html
    assert "Sampler comparison" in html and "Not run: this project mines with one sampler (mad)" in html
    summary = json.loads((index.parent / "summary.json").read_text())
    agree = summary["rater_agreement"]
    assert agree["n_images"] == 0 or 0 <= agree["share_span_le_1"] <= 1
    assert (index.parent / "ranking_stability.csv").read_text().startswith("k,srcc")
    assert round_scenarios(Project.create(tmp_path / "fresh", make_config(world))) is None
    html = links_ok(write_round_report(p, 1, tmp_path / "last"))  # the last round forms no S
    assert "No S in this round yet" in html

    from blindspots.cli import app

    # `blindspots report PROJECT` opens the project once and reads the scan's manifest once
    opened, manifests = [], []
    real_open, real_read = Project.open.__func__, Path.read_text

    def counting_open(cls, *args, **kwargs):  # noqa: ANN001, ANN202
        opened.append(args)
        return real_open(cls, *args, **kwargs)

    def counting_read(self, *args, **kwargs):  # noqa: ANN001, ANN202
        if self.name == "scan.json":
            manifests.append(self)
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Project, "open", classmethod(counting_open))
    monkeypatch.setattr(Path, "read_text", counting_read)
    res = CliRunner().invoke(app, ["report", str(p.path), "--round", "0", "--out", str(tmp_path / "cli"),
                                   "--scenarios"])
    monkeypatch.undo()
    assert res.exit_code == 0, res.output
    assert len(opened) == 1 and len(manifests) == 1, (opened, manifests)
    html = links_ok(tmp_path / "cli" / "index.html")
    assert "Failure scenarios" in html and "Scenario 1:" in html and "most typical" in html
    assert "scenario vote set:" in res.output and (tmp_path / "cli" / "scenario-votes" / "classes.json").is_file()
    assert "seg-r0-s000" in (tmp_path / "cli" / "scenario-votes" / "items.csv").read_text()
    with pytest.raises(ValueError, match="round"):
        write_round_report(p, 7, tmp_path / "bad")


@pytest.mark.parametrize("ignore", [None, 7, 255])
def test_per_class_iou_uses_the_projects_ignore_value(ignore: int | None) -> None:
    """The round page's per-class IoU leaves out the project's ignore value, whatever it is."""
    import numpy as np

    from blindspots.metrics import confusion_matrix, iou_per_class
    from blindspots.report.pages.round import class_iou_before_after

    rng = np.random.default_rng(0)
    gt = rng.integers(0, 3, (2, 8, 8)).astype(np.uint8)
    before, after = rng.integers(0, 3, (2, 2, 8, 8)).astype(np.uint8)
    labels = gt.copy()
    if ignore is not None:
        labels[:, :2] = ignore  # two rows of each mask are not labelled
    triples = [(labels[0], before[0], after[0]), (labels[1], before[1], after[1]),
               (labels[0], None, after[0]), (labels[1], before[1], after[1][:4])]  # left out: a map missing/smaller
    got_before, got_after, used = class_iou_before_after(triples, 3, ignore)
    keep = np.ones(gt.shape, bool) if ignore is None else labels != ignore
    want = [iou_per_class(confusion_matrix(m[keep][None], gt[keep][None], 3, ignore_index=None)) for m in (before, after)]
    assert used == 2
    np.testing.assert_allclose(got_before, want[0])
    np.testing.assert_allclose(got_after, want[1])
