"""The front door's objects past the happy path of docs/python.md: bad arguments name themselves, and a
project's answers go in through `blindspots.Project` as through the commands."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import blindspots
from blindspots.data.scenes import SCENE_CLASSES, generate_scene_set
from test_docs_python import tiny_competitor, tiny_target  # noqa: F401 - the specs below import them

TARGET = {"target": "test_docs_python:tiny_target"}
COMPETITORS = {"competitor": "test_docs_python:tiny_competitor"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("front")
    generate_scene_set(root / "pool", 16, seed=2, distribution="pool", size=32, progress=False)
    scan = blindspots.scan(str(root / "pool" / "images"), target="target=test_docs_python:tiny_target",
                           competitors=["competitor=test_docs_python:tiny_competitor"], out=root / "scan",
                           progress=False)
    return {"root": root, "scan": scan}


def test_a_scan_opens_again_and_refuses_what_is_not_one(world: dict, tmp_path: Path) -> None:
    again = blindspots.open_scan(world["root"] / "scan")
    assert again.target == "target" and again.competitors == ["competitor"]
    pd.testing.assert_frame_equal(again.table, world["scan"].table)
    with pytest.raises(ValueError, match=r"^folder: expected a scan folder with scan.json"):
        blindspots.open_scan(tmp_path)
    with pytest.raises(KeyError, match="image_id: expected an id of the scan"):
        again.maps("no-such-image.png")
    with pytest.raises(ValueError, match=r"^target: expected \{name: model or spec\} or 'NAME=SPEC' strings"):
        blindspots.scan(str(world["root"] / "pool" / "images"), target="no-name-here", out=tmp_path / "s")
    with pytest.raises(ValueError, match=r"^target: expected one model"):
        blindspots.scan(str(world["root"] / "pool" / "images"), target={**TARGET, **COMPETITORS}, out=tmp_path / "s")


def test_a_project_takes_answers_and_says_what_next(world: dict, tmp_path: Path) -> None:
    root = world["root"]
    with pytest.raises(ValueError, match=r"^pool.root \(--pool\): expected an existing folder"):
        blindspots.Project.create(tmp_path / "p0", pool=tmp_path / "nothing", target=TARGET, competitors=COMPETITORS)
    assert not (tmp_path / "p0").exists()
    project = blindspots.Project.create(tmp_path / "p", pool=root / "pool" / "images", target=TARGET,
                                        competitors=COMPETITORS, scan=world["scan"], raters=1, n3=2, n4=2,
                                        test_size=2)
    st = project.status()
    assert (st.state, st.step) == ("ready", "mine") and [a.as_call() for a in st.next] == ["project.advance()"]
    st = project.advance(progress=False)
    assert st.state == "awaiting_ratings" and [a.kind for a in st.next] == ["rate", "import_ratings", "advance"]
    csv = tmp_path / "ratings.csv"
    pd.DataFrame({"image_id": st.awaited, "rater": "ann", "score": [1 + k % 5 for k in range(len(st.awaited))]}
                 ).to_csv(csv, index=False)
    assert project.import_ratings(csv) == len(st.awaited)
    assert project.status().state == "ready"
    st = blindspots.Project.open(tmp_path / "p").advance(progress=False)  # the label plan: S ∪ T exported
    assert st.state == "exported" and [a.kind for a in st.next] == ["import_masks", "register_version"]
    assert project.export("cvat").is_file()
    need = dict.fromkeys(project.loop.answers.candidates(st.round, "S")["id"].tolist()
                         + project.loop.answers.candidates(st.round, "T")["id"].tolist())
    masks = tmp_path / "masks"
    masks.mkdir()
    from PIL import Image

    for image_id in need:
        Image.fromarray(np.zeros((32, 32), np.uint8)).save(masks / (Path(image_id).stem + ".png"))
    assert project.import_masks(masks) == len(need)
    assert project.leaderboard().empty  # T(1) is scored by the next run of the loop, not by the import
    assert project.advance(progress=False).state == "exported"
    board = project.leaderboard()
    assert set(board.index) == {"target", "competitor"} and board.notna().any().any()  # Table 1, round 0


def test_workflows_that_run_models_keep_freed_memory_as_the_commands_do(world: dict, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """blindspots.scan and Project.advance apply `keep_freed_memory` as `blindspots scan` / `round` do
    (the CLI's MODEL_COMMANDS); reading a scan does not."""
    import importlib

    from blindspots.cli import MODEL_COMMANDS

    # the modules (the package's names `scan` and `Project` are the function and class)
    front_scan = importlib.import_module("blindspots.workflows.scan")
    front_project = importlib.import_module("blindspots.workflows.project")

    calls: list[str] = []
    monkeypatch.setattr(front_scan, "keep_freed_memory", lambda: calls.append("scan") or True)
    monkeypatch.setattr(front_project, "keep_freed_memory", lambda: calls.append("advance") or True)
    root = world["root"]
    blindspots.open_scan(root / "scan").table
    assert calls == []
    blindspots.scan(str(root / "pool" / "images"), target=TARGET, out=tmp_path / "s", progress=False)
    project = blindspots.Project.create(tmp_path / "p", pool=root / "pool" / "images", target=TARGET,
                                        competitors=COMPETITORS, scan=world["scan"])
    project.advance(max_steps=0, progress=False)
    assert calls == ["scan", "advance"] and {"scan", "round"} <= MODEL_COMMANDS


def test_label_issues_of_a_scanned_pool_flag_the_wrong_mask_as_the_command_does(world: dict, tmp_path: Path) -> None:
    """`Scan.label_issues`: people's masks of the scanned pool judged by a model; the same tables as the
    `label-issues` command on the same images, masks and model (both call `labels.write_label_issues`)."""
    from PIL import Image
    from typer.testing import CliRunner

    from blindspots.cli import app

    root, scan = world["root"], world["scan"]
    ids = sorted(scan.table["id"])
    masks, probs = tmp_path / "masks", tmp_path / "probs"  # the model: probabilities that agree with the truth
    masks.mkdir()
    probs.mkdir()
    wrong = ids[3]
    for i in ids:
        m = np.asarray(Image.open(root / "pool" / "masks" / (Path(i).stem + ".png")))
        k = SCENE_CLASSES.num_classes
        p = np.full((k, *m.shape), 0.05 / (k - 1), np.float32)
        np.put_along_axis(p, m[None].astype(np.int64), 0.95, axis=0)
        for name in (i, Path(i).stem):  # the pool's ids; the command's --images folder names images by stem
            np.save(probs / f"{name}.npy", p)
        if i == wrong:  # a person labelled a block with the next class
            m = m.copy()
            m[:12, :12] = (m[:12, :12] + 1) % k
        Image.fromarray(m.astype(np.uint8)).save(masks / (Path(i).stem + ".png"))
    review = scan.label_issues(masks, str(probs), out=tmp_path / "lib", top=2)
    by_id = review.images.set_index("id")
    assert review.images["id"].iloc[0] == wrong and by_id.loc[wrong, "issue_pixels"] == 144
    assert (by_id.drop(wrong)["issue_pixels"] == 0).all() and set(by_id.index) == set(ids)
    assert {"images.csv", "regions.csv", "summary.json", "worst.png", "issues"} <= \
        {p.name for p in (tmp_path / "lib").iterdir()}
    res = CliRunner().invoke(app, ["label-issues", "--images", str(root / "pool" / "images"), "--masks", str(masks),
                                   "--model", str(probs), "--out", str(tmp_path / "cli"), "--top", "2",
                                   "--no-progress"])
    assert res.exit_code == 0, res.output
    lib = pd.read_csv(tmp_path / "lib" / "images.csv")
    pd.testing.assert_frame_equal(lib.assign(id=[Path(i).stem for i in lib["id"]]),
                                  pd.read_csv(tmp_path / "cli" / "images.csv"))
    pd.testing.assert_frame_equal(scan.label_issues(masks, str(probs)).images, review.images)  # without a folder
    # a scan holds predictions, not labels: without masks of the pool, the error says what is needed
    with pytest.raises(ValueError, match=r"^masks: expected masks named like the images of .* got none that pair"):
        scan.label_issues(root / "scan", str(probs))
    with pytest.raises(ValueError, match=r"^masks: expected a folder of label masks of the pool's images"):
        scan.label_issues(None, str(probs))  # type: ignore[arg-type]
