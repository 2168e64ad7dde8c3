"""`blindspots init | round | status | ratings import | export | masks import | leaderboard`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from blindspots.cli import app
from cli_subprocess import imports_torch

torch.set_num_threads(1)
runner = CliRunner()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from blindspots.data.scenes import SCENE_CLASSES, generate_scene_set
    from blindspots.training.segmentation import train_segmenter
    from blindspots.models.zoo import build_model, save_checkpoint

    root = tmp_path_factory.mktemp("cliworld")
    generate_scene_set(root / "pool", 30, seed=11, distribution="pool", size=32, progress=False)
    s0 = generate_scene_set(root / "train", 6, seed=12, distribution="train", size=32, progress=False)
    generate_scene_set(root / "val", 4, seed=13, distribution="train", size=32, progress=False)
    for k, (name, arch) in enumerate((("target", "tiny_unet"), ("comp", "small_fcn"))):
        torch.manual_seed(k)
        model = build_model(arch, SCENE_CLASSES.num_classes)
        train_segmenter(model, s0, epochs=3, batch_size=3, seed=k, progress=False)  # in place
        save_checkpoint(root / f"{name}.pt", model, arch=arch, classes=SCENE_CLASSES, meta={})
    return root


def invoke(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, [str(a) for a in args])
    return res.exit_code, res.output + (res.stderr if res.stderr_bytes is not None else "")


def init(world: Path, proj: Path, *extra: str) -> tuple[int, str]:
    return invoke("init", proj, "--pool", world / "pool" / "images", "--target", f"target={world / 'target.pt'}",
                  "--competitor", f"comp={world / 'comp.pt'}", "--train-data", world / "train",
                  "--val-data", world / "val", "--ground-truth", world / "pool" / "masks", "--rounds", "1",
                  "--n3", "2", "--n4", "2", "--raters", "1", "--test-size", "3", "--epochs", "1",
                  "--lrs", "0.01", *extra)


def test_a_project_from_init_to_leaderboard(world: Path, tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    code, out = init(world, proj)
    assert code == 0, out
    assert (proj / "blindspots.toml").is_file() and (proj / "store.sqlite").is_file()
    code, out = invoke("round", proj)
    assert code == 0 and "waiting for ratings" in out, out
    from blindspots.loop.project import Project

    ids = list(Project.open(proj).answers.candidates(0, "M")["id"])
    csv = tmp_path / "r.csv"
    csv.write_text("image_id,rater,score\n" + "".join(f"{x},alice,{1 + k % 5}\n" for k, x in enumerate(ids)))
    code, out = invoke("ratings", "import", proj, csv)
    assert code == 0 and f"imported {len(ids)} ratings" in out, out
    code, out = invoke("round", proj)
    assert code == 0 and "waiting for pixel labels" in out, out
    code, out = invoke("status", proj)
    assert code == 0 and "waiting for masks" in out and "round 0  mine" in out, out
    # the step waiting for people has no finish time: its start, not "nan"
    masks_line = next(line for line in out.splitlines() if line.startswith("round 0  masks"))
    assert "nan" not in masks_line and "started 20" in masks_line, out
    code, out = invoke("export", proj, "--format", "cvat", "--out", tmp_path / "cvat.zip")
    assert code == 0 and (tmp_path / "cvat.zip").is_file(), out
    code, out = invoke("export", proj, "--format", "labelstudio")
    assert code == 0 and "labelstudio.json" in out, out
    # Label Studio serves local files under a strict subfolder of its document root: by default the
    # task URL is the pool's path relative to the pool's parent; --image-url sets any other location.
    import json

    ls = tmp_path / "ls.json"
    code, out = invoke("export", proj, "--format", "labelstudio", "--out", ls)
    tasks = json.loads(ls.read_text())
    assert code == 0 and all(t["data"]["image"] == f"/data/local-files/?d=images/{t['data']['blindspots_id']}"
                             for t in tasks), out  # the pool is world/pool/images
    code, out = invoke("export", proj, "--format", "labelstudio", "--out", ls, "--image-url", "http://h/img/{id}")
    tasks = json.loads(ls.read_text())
    assert code == 0 and all(t["data"]["image"] == f"http://h/img/{t['data']['blindspots_id']}" for t in tasks)
    code, out = invoke("export", proj, "--format", "coco")
    assert code == 2 and "format" in out
    # the bookkeeping commands read the project and its scan: no model is loaded, torch is not imported
    assert not imports_torch("status", proj)
    assert not imports_torch("export", proj, "--format", "labelstudio", "--out", tmp_path / "ls2.json")
    assert json.loads((tmp_path / "ls2.json").read_text()) == json.loads(ls.read_text().replace(
        "http://h/img/", "/data/local-files/?d=images/"))
    # Masks come back through the CVAT round trip (here: the pre-annotation itself).
    code, out = invoke("masks", "import", proj, tmp_path / "cvat.zip", "--annotator", "bob")
    assert code == 0 and "imported" in out, out
    code, out = invoke("round", proj, "--simulate")
    assert code == 0 and "all 1 rounds are done" in out, out
    # every `round` ends by writing the round's report page
    assert "could not write the round report" not in out, out
    page = Path(out.split("report: ")[1].split()[0])
    assert page.name == "index.html" and page.is_file(), out
    code, out = invoke("leaderboard", proj)
    assert code == 0 and "target" in out and "T2" in out and "comp" in out, out
    masks = Project.open(proj).answers.masks_for_round(0)
    assert set(masks["source"]) == {"cvat"} and set(masks["annotator"]) == {"bob"}


def test_clear_errors(world: Path, tmp_path: Path) -> None:
    code, out = invoke("round", tmp_path / "missing")
    assert code == 2 and "project folder" in out
    code, out = invoke("init", tmp_path / "p", "--pool", tmp_path / "nopool", "--target", world / "target.pt",
                       "--competitor", f"comp={world / 'comp.pt'}", "--train-data", world / "train",
                       "--val-data", world / "val")
    assert code == 2 and "--pool" in out
    code, out = init(world, tmp_path / "q", "--strategy", "best")
    assert code == 2 and "mining.strategy" in out
    assert init(world, tmp_path / "r")[0] == 0
    code, out = init(world, tmp_path / "r")
    assert code == 2 and "already" in out
    (tmp_path / "bad.csv").write_text("image_id,rater,score\nx.png,alice,9\n")
    invoke("round", tmp_path / "r")
    # waiting for ratings: nothing to label yet, and the error says why (not "every image has a mask")
    code, out = invoke("export", tmp_path / "r", "--format", "labelstudio")
    assert code == 2 and "S ∪ T are not chosen yet" in out and "has a mask" not in out, out
    code, out = invoke("ratings", "import", tmp_path / "r", tmp_path / "bad.csv")
    assert code == 2 and "score" in out
    code, out = invoke("ratings", "import", tmp_path / "r", tmp_path / "nothere.csv")  # named, not errno text
    assert code == 2 and out.startswith(f"error: csv: expected an existing CSV file, got '{tmp_path / 'nothere.csv'}'"), out


def test_demo_runs_end_to_end_on_tiny_sizes_and_resumes(tmp_path: Path) -> None:
    from blindspots.cli.demo import run_demo

    sizes = {"size": 32, "n_train": 12, "n_val": 6, "n_pool": 40, "zoo_epochs": 1, "target": "tiny_unet",
             "competitors": ("small_fcn",), "rounds": 1, "n3": 2, "n4": 3, "raters": 2, "test_size": 4,
             "ft_epochs": 1, "ft_lrs": [1e-3], "max_replay": 4}
    lines: list[str] = []
    res = run_demo(tmp_path / "demo", sizes=sizes, progress=False, echo=lines.append)
    assert res["status"].finished
    board = res["leaderboard"]
    assert list(board.index) == ["small_fcn", "target"] and ("round 1", "T2") in board.columns
    assert (tmp_path / "demo" / "project" / "reports" / "leaderboard.txt").is_file()
    # Re-running reuses everything: the project is resumed, no step runs again.
    again = run_demo(tmp_path / "demo", sizes=sizes, progress=False, echo=lines.append)
    assert any("resuming" in line for line in lines) and again["status"].finished
    with pytest.raises(ValueError, match="sizes"):
        run_demo(tmp_path / "x", sizes={"bogus": 1})


def test_a_second_round_on_the_same_project_waits_then_says_another_runs(world: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from blindspots.loop import lock

    proj = tmp_path / "p"
    code, out = init(world, proj)
    assert code == 0, out
    monkeypatch.setattr(lock, "DEFAULT_WAIT_S", 0.3)
    with lock.advance_lock(proj):  # another run holds the project (its own open file, as another process would)
        code, out = invoke("round", proj, "--max-steps", "1")
    assert code == 2 and "expected no other run of the loop" in out and "after waiting 0.3 s" in out, out
    from blindspots.loop import Project

    assert Project.open(proj).journal.step(0, "scan") is None  # the refused run ran nothing
    code, out = invoke("round", proj, "--max-steps", "1")  # the lock is free again
    assert code == 0 and "paused before step 'mine'" in out, out
