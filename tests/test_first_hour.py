"""The first hour of one person with their own models and no training data: a rater quota they can
change (and are told to), one count everywhere, a scan made before `init` reused (or refused with
the reason), a past round exported again with its Label Studio config, and `status` after an import."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image
from typer.testing import CliRunner

from blindspots.cli import app as cli_app
from blindspots.loop.project import Project

torch.set_num_threads(1)
SIZE = 32


class Tiny(torch.nn.Module):
    """float [N, 3, H, W] -> [N, C, H, W] scores: one seeded 3x3 convolution."""

    def __init__(self, c: int = 3, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.conv = torch.nn.Conv2d(3, c, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def cli(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(cli_app, [str(a) for a in args])
    out = res.output
    if res.stderr_bytes is not None and res.stderr not in out:  # click < 8.2 keeps stderr apart
        out += res.stderr
    return res.exit_code, out


@pytest.fixture()
def setup(tmp_path: Path) -> dict[str, Path]:
    """A pool of 12 images of coloured blocks and three TorchScript models (two of them the same kind)."""
    rng = np.random.default_rng(0)
    pool = tmp_path / "pool"
    pool.mkdir()
    for k in range(12):
        img = np.zeros((SIZE, SIZE, 3), np.uint8)
        for _ in range(4):
            y, x, h, w = rng.integers(0, SIZE - 8, 4)
            img[y:y + h + 4, x:x + w + 4] = rng.integers(0, 256, 3)
        Image.fromarray(img).save(pool / f"img{k:02d}.png")
    out = {"pool": pool}
    for name, seed in (("target", 0), ("comp", 1), ("other", 2)):
        out[name] = tmp_path / f"{name}.ts"
        torch.jit.script(Tiny(3, seed).eval()).save(str(out[name]))
    return out


def init(tmp_path: Path, s: dict[str, Path], *extra: object) -> tuple[int, str]:
    return cli("init", tmp_path / "proj", "--pool", s["pool"], "--target", f"target={s['target']}",
               "--competitor", f"comp={s['comp']}", "--n3", 3, "--n4", 2, "--test-size", 2, *extra)


def test_one_annotator_finishes_a_round_and_exports_a_past_round_again(tmp_path: Path, setup: dict) -> None:
    code, out = init(tmp_path, setup)  # the default quota: 3 ratings per image
    assert code == 0 and "ratings: 3 per candidate image" in out and "--raters N" in out, out
    proj = tmp_path / "proj"
    assert "waiting for ratings" in cli("round", proj)[1]
    code, out = cli("annotators", "add", proj, "alice")
    assert code == 0 and "needs 3 ratings and 1 person can rate" in out and "--raters 1" in out, out
    token = re.search(r"#token=(\S+)", out).group(1)

    client = TestClient(__import__("blindspots.app", fromlist=["create_app"]).create_app(proj))
    auth = {"Authorization": f"Bearer {token}"}
    queue = client.get("/api/ratings/queue", headers=auth).json()
    n = queue["total"]
    assert n > 0 and queue["progress"]["unreachable"] and "--raters 1" in queue["progress"]["advice"]
    for k, item in enumerate(queue["items"]):
        r = client.post("/api/ratings", json={"round": 0, "image_id": item["id"], "score": 1 + k % 5}, headers=auth)
        assert r.status_code == 200, r.text
    # one count, labelled, in the app, `status` and `round`: images rated by enough people, answers in
    counts = f"0 of {n} images rated by enough people (3 each), {n} of {3 * n} answers in"
    assert r.json()["progress"]["counts"] == counts and r.json()["progress"]["next"] is None  # others must rate
    code, st = cli("status", proj)
    assert code == 0 and counts in st and "only 1 person can rate (alice)" in st and "--raters 1" in st, st
    page = (proj / "reports" / "html" / "round-0" / "index.html").read_text()  # rewritten by `status`
    assert counts in page and "target_v0 and comp" not in page and "target and comp label" in page
    assert "only 1 person can rate" in cli("round", proj)[1]

    code, out = cli("config", proj, "--raters", 1)
    assert code == 0 and "ratings.raters: 3 -> 1" in out and f"{n} of {n} images rated by enough people" in out, out
    assert cli("config", proj, "--raters", 0)[0] == 2
    # alone and done: the finished rating page says what goes on (rate.js shows `progress.next`)
    client = TestClient(__import__("blindspots.app", fromlist=["create_app"]).create_app(proj))  # the new quota
    progress = client.get("/api/ratings/queue", headers=auth).json()["progress"]
    assert progress["next"] == f"blindspots round {proj}", progress
    code, out = cli("round", proj)
    assert code == 0 and "exported for pixel labelling" in out and "cannot fine-tune" in out, out
    folder = proj / "reports" / "round-0"
    xml = (folder / "labelstudio_config.xml").read_text()  # the labelling config beside the tasks
    assert '<BrushLabels name="tag" toName="image">' in xml and xml.count('<Label value="class_2"') >= 1

    # the masks come back; `status` and `round` say so, and the round is scored
    p = Project.open(proj)
    need = sorted(set(p.answers.candidates(0, "S")["id"]) | set(p.answers.candidates(0, "T")["id"]))
    code, out = cli("masks", "import", proj, folder / "predictions")
    assert code == 0 and f"imported {len(need)} masks" in out, out
    code, st = cli("status", proj)
    assert code == 0 and f"round 0: {len(need)} masks imported (folder" in st, st
    code, out = cli("round", proj)
    assert code == 0 and f"{len(need)} of {len(need)} masks of S(1) ∪ T(1) in" in out, out
    assert "every model was scored on T(1)" in out and "blindspots register" in out, out
    # a finished round is exported again by number, with the stored masks and the config
    assert "`--round 0` exports them again" in cli("export", proj, "--format", "labelstudio")[1]
    code, out = cli("export", proj, "--format", "labelstudio", "--round", 0, "--out", tmp_path / "again.json")
    assert code == 0 and "again_config.xml" in out, out
    tasks = json.loads((tmp_path / "again.json").read_text())
    assert sorted(t["data"]["blindspots_id"] for t in tasks) == need
    assert (tmp_path / "again_config.xml").read_text() == xml


def test_init_reuses_a_fitting_scan_and_refuses_another(tmp_path: Path, setup: dict) -> None:
    scan = tmp_path / "scan"
    code, out = cli("scan", setup["pool"], "-t", f"target={setup['target']}", "-c", f"comp={setup['comp']}",
                    "--out", scan, "--no-progress")
    assert code == 0, out
    # other weights, other options, another pool: refused with the reason, nothing created
    code, out = cli("init", tmp_path / "p1", "--pool", setup["pool"], "-t", f"target={setup['target']}",
                    "-c", f"comp={setup['other']}", "--scan", scan)
    assert code == 2 and "--scan: expected 'comp' with the same weights as in the scan" in out, out
    assert not (tmp_path / "p1").exists()
    code, out = cli("init", tmp_path / "p2", "--pool", setup["pool"], "-t", f"target={setup['target']}?pad=16",
                    "-c", f"comp={setup['comp']}", "--scan", scan)
    assert code == 2 and "--scan: expected 'target' with the scan's spec options" in out, out
    (tmp_path / "names.txt").write_text("sky\nroad\ncar\n")  # the scan named them class_0..class_2
    code, out = cli("init", tmp_path / "p4", "--pool", setup["pool"], "-t", f"target={setup['target']}?classes="
                    f"{tmp_path / 'names.txt'}", "-c", f"comp={setup['comp']}", "--scan", scan)
    assert code == 2 and "--scan: expected the target's classes ['sky', 'road', 'car']" in out, out
    fewer = tmp_path / "fewer"
    fewer.mkdir()
    for f in sorted(setup["pool"].iterdir())[:6]:
        (fewer / f.name).write_bytes(f.read_bytes())
    code, out = cli("init", tmp_path / "p3", "--pool", fewer, "-t", f"target={setup['target']}",
                    "-c", f"comp={setup['comp']}", "--scan", scan)
    assert code == 2 and "--scan: expected a scan of the project's pool" in out and "(6 images)" in out, out

    code, out = init(tmp_path, setup, "--scan", scan)
    assert code == 0 and "taken as round 0's scan" in out, out
    proj = tmp_path / "proj"
    # the taken scan is round 0's finished scan step: `status` goes on with mining, not "next step is 'scan'"
    code, out = cli("status", proj)
    assert code == 0 and "round 0: next step is 'mine'" in out and "next: blindspots round" in out, out
    assert "round 0  scan      done" in out, out
    code, out = cli("round", proj)
    assert code == 0 and "waiting for ratings" in out and "blindspots ratings import" in out, out
    # the maps are the scan's own files (hard links): `round` did not scan again
    theirs, ours = scan / "maps" / "target" / "img00.png", proj / "scans" / "maps" / "target_v0" / "img00.png"
    assert os.stat(theirs).st_ino == os.stat(ours).st_ino
    from blindspots.scan import read_score_table

    a = read_score_table(scan).set_index("id")["dpa__target__comp"]
    b = read_score_table(proj / "scans", target="target_v0", competitors=["comp"]).set_index("id")["dpa__target_v0__comp"]
    assert np.array_equal(a.sort_index().to_numpy(), b.sort_index().to_numpy())


def test_one_person_is_told_when_s_would_be_every_candidate_and_can_lower_n4(tmp_path: Path, setup: dict,
                                                                            caplog) -> None:
    args = ["--pool", setup["pool"], "--target", f"target={setup['target']}", "--competitor", f"comp={setup['comp']}",
            "--n3", 3, "--raters", 1, "--test-size", 2]
    # without --n4, init takes a quarter of the most candidates a round can mine (loop/budget.py), and says so
    code, out = cli("init", tmp_path / "auto", *args)
    assert code == 0 and "masks per round: the paper's 100 is not less than" in out, out
    assert Project.open(tmp_path / "auto").config.ratings.n4 < 100
    # the paper's 100 asked for explicitly: init warns before any round, and mining warns again
    code, out = cli("init", tmp_path / "proj", *args, "--n4", 100)
    assert code == 0 and "warning: --n4 100 is not less than" in out, out
    proj = tmp_path / "proj"
    with caplog.at_level("WARNING", logger="blindspots.loop.steps.mine"):
        assert "waiting for ratings" in cli("round", proj)[1]
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "S is every candidate: n4 = 100" in said and "the `config --n4` command" in said, said
    code, out = cli("config", proj, "--n4", 2)
    assert code == 0 and "ratings.n4: 100 -> 2" in out, out
    assert Project.open(proj).config.ratings.n4 == 2 and "ratings.n4: 2 (change: --n4 N)" in cli("config", proj)[1]
    code, out = cli("config", proj, "--n4", 0)
    assert code == 2 and "--n4" in out, out
