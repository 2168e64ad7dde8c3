"""A user's own models (ONNX, TorchScript, a callable, precomputed outputs, a zoo
checkpoint) and an unlabeled pool, carried through `init` (no train/val data) -> `round` (stops
at ratings) -> the app's rating page -> ratings -> `round` (S exported for pixel labelling).
Plus the failure paths: a bad spec fails at init in one line, a failed step shows as failed and
is retried, a corrupt store is one line, `register` continues with the next version."""
from __future__ import annotations

import gc
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image
from typer.testing import CliRunner

from blindspots.cli import app as cli_app
from blindspots.loop.project import Project
from hf_helpers import tiny_segformer

torch.set_num_threads(1)
SIZE = 32
TOKEN = "ann-token-0001"


class Tiny(torch.nn.Module):
    """float [N, 3, H, W] -> [N, C, H, W] scores: one 3x3 convolution (untrained, seeded)."""

    def __init__(self, c: int = 3, seed: int = 0, sigmoid: bool = False) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.conv = torch.nn.Conv2d(3, c, 3, padding=1)
        self.sigmoid = sigmoid

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return torch.sigmoid(y) if self.sigmoid else y


def save_ts(module: torch.nn.Module, path: Path) -> Path:
    torch.jit.script(module.eval()).save(str(path))
    return path


def save_onnx(module: torch.nn.Module, path: Path) -> Path:
    with torch.no_grad():
        torch.onnx.export(module.eval(), (torch.zeros(1, 3, SIZE, SIZE),), str(path), input_names=["images"],
                          output_names=["scores"], dynamic_axes={"images": {0: "n", 2: "h", 3: "w"}, "scores": {0: "n", 2: "h", 3: "w"}},
                          opset_version=17, dynamo=False)
    return path


CALLABLE = '''
import numpy as np

def segment(images):
    """uint8 [N, H, W, 3] -> probabilities [N, 3, H, W] from the colour channels."""
    x = images.astype(np.float32).transpose(0, 3, 1, 2) / 64.0
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
'''


FACTORY = '''
import torch

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        return self.conv(x)

def build():
    return Tiny()
'''


@pytest.fixture()
def pool(tmp_path: Path) -> Path:
    """12 images of coloured blocks (the models disagree on them)."""
    rng = np.random.default_rng(0)
    root = tmp_path / "pool"
    root.mkdir()
    for k in range(12):
        img = np.zeros((SIZE, SIZE, 3), np.uint8)
        for _ in range(4):
            y, x, h, w = rng.integers(0, SIZE - 8, 4)
            img[y:y + h + 4, x:x + w + 4] = rng.integers(0, 256, 3)
        Image.fromarray(img).save(root / f"img{k:02d}.png")
    return root


def make_spec(kind: str, tmp_path: Path, pool: Path) -> tuple[str, str]:
    """(target spec, competitor spec) for one kind, files written under tmp_path."""
    comp3 = str(save_ts(Tiny(3, seed=1), tmp_path / "comp.ts"))
    if kind == "torchscript":
        return str(save_ts(Tiny(3, seed=0), tmp_path / "target.ts")), comp3
    if kind == "onnx":
        return str(save_onnx(Tiny(3, seed=0), tmp_path / "target.onnx")), comp3
    if kind in ("onnx_binary_logits", "onnx_binary_probabilities"):
        sig = kind.endswith("probabilities")
        path = save_onnx(Tiny(1, seed=0, sigmoid=sig), tmp_path / "target.onnx")
        from blindspots.models.load import load_model

        spec = f"{path}?output={'probabilities' if sig else 'logits'}"
        assert load_model(spec).num_classes == 2  # a one-channel head is a binary model
        return spec, str(save_ts(Tiny(2, seed=1), tmp_path / "comp2.ts"))
    if kind == "callable":
        (tmp_path / "my_seg_models.py").write_text(CALLABLE)
        sys.modules.pop("my_seg_models", None)
        return "my_seg_models:segment", comp3
    if kind == "callable_lowres":  # output at half the image size; the loader resizes it
        (tmp_path / "my_seg_lowres.py").write_text(CALLABLE.replace("images.astype", "images[:, ::2, ::2].astype"))
        sys.modules.pop("my_seg_lowres", None)
        return "my_seg_lowres:segment", comp3
    if kind == "factory":  # package.module:factory + a state_dict
        (tmp_path / "my_seg_factory.py").write_text(FACTORY)
        sys.modules.pop("my_seg_factory", None)
        torch.save(Tiny(3, seed=3).state_dict(), tmp_path / "w.pt")
        return "my_seg_factory:build?weights=w.pt", comp3
    if kind == "hf":  # a tiny SegFormer saved with save_pretrained (built from a config, no download)
        tiny_segformer().save_pretrained(tmp_path / "segformer")
        return str(tmp_path / "segformer"), comp3
    if kind == "precomputed":
        folder = tmp_path / "probs"
        folder.mkdir()
        rng = np.random.default_rng(1)
        for f in sorted(pool.iterdir()):  # `<id>.npy`, float32 [C, H, W] probabilities
            p = rng.random((3, SIZE, SIZE)).astype(np.float32)
            np.save(folder / (f.name + ".npy"), p / p.sum(0, keepdims=True))
        return str(folder), comp3
    if kind == "zoo":
        from blindspots.data.scenes import SCENE_CLASSES
        from blindspots.models.zoo import build_model, save_checkpoint

        torch.manual_seed(0)
        save_checkpoint(tmp_path / "target.pt", build_model("tiny_unet", SCENE_CLASSES.num_classes),
                        arch="tiny_unet", classes=SCENE_CLASSES)
        return str(tmp_path / "target.pt"), str(save_ts(Tiny(SCENE_CLASSES.num_classes, seed=1),
                                                          tmp_path / "comp.ts"))
    raise AssertionError(kind)


def cli(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(cli_app, [str(a) for a in args])
    out = res.output
    if res.stderr_bytes is not None and res.stderr not in out:  # click < 8.2 keeps stderr apart
        out += res.stderr
    return res.exit_code, out


def init(tmp_path: Path, pool: Path, target: str, comp: str, *extra: object) -> tuple[int, str]:
    return cli("init", tmp_path / "proj", "--pool", pool, "--target", f"target={target}",
               "--competitor", f"comp={comp}", "--n3", 3, "--n4", 2, "--raters", 1, "--test-size", 2, *extra)


def rate_everything_in_the_app(proj: Path) -> int:
    """Sign in, open the rating page, rate every candidate through the API; returns how many."""
    Project.open(proj).answers.add_annotator("ann", TOKEN)
    from blindspots.app import create_app

    client = TestClient(create_app(proj))
    assert client.post("/api/signin", json={"token": TOKEN}).status_code == 200
    page = client.get("/rate")
    assert page.status_code == 200 and "rate" in page.text.lower()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    queue = client.get("/api/ratings/queue", headers=auth).json()
    assert queue["round"] == 0 and queue["total"] > 0 and queue["classes"]["names"]
    for k, item in enumerate(queue["items"]):
        r = client.get("/api/images/prediction", params={"round": 0, "id": item["id"]}, headers=auth)
        assert r.status_code == 200 and r.headers["content-type"] == "image/png"
        r = client.post("/api/ratings", json={"round": 0, "image_id": item["id"], "score": 1 + k % 5}, headers=auth)
        assert r.status_code == 200, r.text
    return queue["total"]


@pytest.mark.parametrize("kind", ["torchscript", "onnx", "onnx_binary_logits", "onnx_binary_probabilities",
                                  "callable", "callable_lowres", "precomputed", "factory", "hf"])
def test_own_model_init_round_rate_export(kind: str, tmp_path: Path, pool: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a callable spec imports from the folder `init` runs in
    monkeypatch.delenv("LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT", raising=False)
    target, comp = make_spec(kind, tmp_path, pool)
    code, out = init(tmp_path, pool, target, comp)
    assert code == 0, out
    proj = tmp_path / "proj"
    code, out = cli("round", proj)
    assert code == 0 and "waiting for ratings" in out, out
    n = rate_everything_in_the_app(proj)
    code, out = cli("round", proj)
    # module:factory and Hugging Face targets are trainable: without S0/T0 it is the data that is missing
    why = "no training data" if kind in ("factory", "hf") else "cannot fine-tune"
    assert code == 0 and "exported for pixel labelling" in out and why in out, out
    if kind == "onnx":
        assert "is an ONNX model" in out, out
    # one line says where the loop stopped (after indented lines of what ran); then the round report's path
    said = [x for x in out.splitlines() if x.strip() and not x.startswith(("report: ", "next: ", "  "))]
    assert len(said) == 1 and "exported for pixel labelling" in said[0], out
    assert f"next: blindspots masks import {proj} FOLDER" in out and f"or: blindspots register {proj} SPEC" in out
    folder = proj / "reports" / "round-0"
    p = Project.open(proj)
    s, t = (set(p.answers.candidates(0, k)["id"]) for k in "ST")
    assert 0 < len(s) <= 2 and s | t <= set(p.answers.candidates(0, "M")["id"]) and len(p.answers.candidates(0, "M")) == n
    assert (folder / "cvat.zip").is_file() and (folder / "labelstudio.json").is_file()
    # Label Studio tasks point at the pool's files below the document root (default: the pool's
    # parent), as `blindspots export` writes them; it was the bare `?d=<id>`, which finds nothing
    import json

    tasks = json.loads((folder / "labelstudio.json").read_text())
    assert {x["data"]["image"] for x in tasks} == {f"/data/local-files/?d=pool/{x}" for x in s | t}
    assert {f.name for f in (folder / "images").iterdir()} == {x for x in s | t}  # ids are .png already
    assert {f.name for f in (folder / "predictions").iterdir()} == {x for x in s | t}
    # Nothing more to do until a new version is registered; status says the same.
    code, again = cli("round", proj)
    assert code == 0 and [x for x in again.splitlines() if not x.startswith("  ")] == \
        [x for x in out.splitlines() if not x.startswith("  ")]
    code, st = cli("status", proj)
    assert code == 0 and "exported for pixel labelling" in st
    # The label page offers S ∪ T (people can draw the masks in the app too).
    from blindspots.app import create_app

    q = TestClient(create_app(proj)).get("/api/labels/queue", headers={"Authorization": f"Bearer {TOKEN}"})
    assert q.status_code == 200, q.text
    assert {x["id"] for x in q.json()["items"] if x["kind"] == "round"} == s | t
    # The pre-annotation comes back as the masks of S ∪ T; the next `round` scores every model on
    # T(1) from the scan's maps (any kind, precomputed outputs too), for `leaderboard`.
    code, out = cli("masks", "import", proj, folder / "predictions")
    assert code == 0 and f"imported {len(s | t)} masks" in out, out
    code, out = cli("round", proj)
    assert code == 0 and "exported for pixel labelling" in out, out
    code, out = cli("leaderboard", proj)
    board = {line.split()[0]: float(line.split()[-1]) for line in out.splitlines()[3:]}
    assert code == 0 and board["target"] == 1.0 and 0.0 <= board["comp"] <= 1.0, out


def test_zoo_target_without_data_mines_by_entropy(tmp_path: Path, pool: Path) -> None:
    target, comp = make_spec("zoo", tmp_path, pool)
    code, out = init(tmp_path, pool, target, comp, "--strategy", "entropy")
    assert code == 0, out
    code, out = cli("round", tmp_path / "proj")
    assert code == 0 and "waiting for ratings" in out, out
    p = Project.open(tmp_path / "proj")
    assert p.journal.step(0, "mine")["result"]["sampler"] == "EntropySampler"
    ranges = (p.reports_dir / "class_ranges.json").read_text()
    assert '"source": "pool predictions"' in ranges


def test_register_next_version_continues_the_loop(tmp_path: Path, pool: Path) -> None:
    target, comp = make_spec("onnx", tmp_path, pool)
    assert init(tmp_path, pool, target, comp)[0] == 0
    proj = tmp_path / "proj"
    cli("round", proj)
    # too early: round 0 still waits for ratings, there is no S(1) to have retrained on
    code, out = cli("register", proj, save_onnx(Tiny(3, seed=7), tmp_path / "early.onnx"))
    assert code == 2 and "expected round 0's S(1) to be exported before version 1 is registered" in out, out
    rate_everything_in_the_app(proj)
    assert "exported" in cli("round", proj)[1]
    assert cli("leaderboard", proj)[1].strip() == "no round has been evaluated yet"
    # The exported pre-annotation comes back as the labels of round 0's S ∪ T (no --round needed).
    code, out = cli("masks", "import", proj, proj / "reports" / "round-0" / "cvat.zip", "--annotator", "bob")
    assert code == 0 and "imported" in out, out
    # the label plan's next step is `register`, not another `round` (which would only repeat the stop)
    assert "all have masks" in out and f"blindspots register {proj} SPEC" in out, out
    retrained = save_onnx(Tiny(3, seed=7), tmp_path / "target_v1.onnx")
    code, out = cli("register", proj, retrained)
    assert code == 0 and "version 1" in out, out
    code, out = cli("round", proj)
    assert code == 0 and "round 1: waiting for ratings" in out, out
    p = Project.open(proj)
    assert p.journal.step(1, "scan")["result"]["scanned"] == ["target_v1"]
    # With T(1)'s masks in, `round` scored round 0's models on T(1): Table 1 without T0 (README step 4).
    # The masks are the target's own pre-annotation, so version 0 scores 1 and the competitor less.
    code, out = cli("leaderboard", proj)
    assert code == 0 and "T1" in out and "T0" not in out, out
    board = {line.split()[0]: line.split() for line in out.splitlines()[3:]}
    assert float(board["target"][-1]) == 1.0 and float(board["comp"][-1]) < 1.0, out
    assert p.journal.step(0, "evaluate")["status"] == "done" and p.registry.metric("target", 0, "T1") == 1.0
    code, out = cli("register", proj, tmp_path / "nothing.onnx")
    assert code == 2 and out.startswith("error:") and len(out.strip().splitlines()) == 1, out


def test_bad_specs_and_data_fail_at_init_in_one_line(tmp_path: Path, pool: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _, comp = make_spec("torchscript", tmp_path, pool)
    (tmp_path / "junk.onnx").write_bytes(b"not an onnx model")
    cases = {
        "models.target": str(tmp_path / "junk.onnx"),
        "models.target ": "no_such_module_xyz:segment",
        "models.target: spec: expected options among": str(tmp_path / "junk.onnx") + "?pad=32&foo=1",
    }
    for needle, spec in cases.items():
        code, out = init(tmp_path, pool, spec, comp)
        assert code == 2 and needle.strip() in out and len(out.strip().splitlines()) == 1, out
        assert not (tmp_path / "proj" / "store.sqlite").exists()
    # Two pool images that differ only by extension would share a map file: refused at init, not
    # by the first `round` after init said yes.
    clash = tmp_path / "clash_pool"
    shutil.copytree(pool, clash)
    shutil.copy(clash / "img00.png", clash / "img00.jpg")
    code, out = init(tmp_path, clash, str(tmp_path / "target.ts"), comp)
    assert code == 2 and "pool.root" in out and "img00.jpg, img00.png (rename one of each)" in out, out
    assert not (tmp_path / "proj" / "store.sqlite").exists()
    # A pool folder of links to photos elsewhere: init says why nothing is readable.
    links = tmp_path / "links_pool"
    links.mkdir()
    (links / "a.png").symlink_to(pool / "img00.png")
    code, out = init(tmp_path, links, str(tmp_path / "target.ts"), comp)
    assert code == 2 and "1 refused, e.g. a.png: symlink pointing outside the pool root" in out, out
    # Different label spaces: found by running one pool image, not after a scan.
    code, out = init(tmp_path, pool, str(save_ts(Tiny(4), tmp_path / "four.ts")), comp)
    assert code == 2 and "label space" in out, out
    # --train-data is checked at init: images with masks.
    (tmp_path / "train" / "images").mkdir(parents=True)
    (tmp_path / "train" / "masks").mkdir()
    code, out = init(tmp_path, pool, str(tmp_path / "target.ts"), comp, "--train-data", tmp_path / "train")
    assert code == 2 and "data.train" in out and len(out.strip().splitlines()) == 1, out


def test_failed_step_is_shown_and_retried(tmp_path: Path, pool: Path) -> None:
    target, comp = make_spec("torchscript", tmp_path, pool)
    assert init(tmp_path, pool, target, comp)[0] == 0
    proj = tmp_path / "proj"
    moved = tmp_path / "target.moved"
    Path(target).rename(moved)  # the model file disappears after init
    code, out = cli("round", proj)
    assert code == 2 and out.startswith("error:") and len(out.strip().splitlines()) == 1, out
    moved.rename(target)
    # Broken model: the scan step raises inside the loop, and status says so.
    Path(target).write_bytes(b"broken")
    code, out = cli("round", proj)
    assert code == 2 and "error:" in out, out
    code, out = cli("status", proj)
    assert code == 0 and "failed: " in out and "retry" in out, out
    save_ts(Tiny(3, seed=0), Path(target))
    code, out = cli("round", proj)
    assert code == 0 and "waiting for ratings" in out, out
    assert "failed" not in cli("status", proj)[1].replace(str(proj), "PROJECT")  # the tmp folder's name has it


def test_corrupt_store_is_one_line(tmp_path: Path, pool: Path) -> None:
    target, comp = make_spec("torchscript", tmp_path, pool)
    assert init(tmp_path, pool, target, comp)[0] == 0
    proj = tmp_path / "proj"
    cli("round", proj)
    store = proj / "store.sqlite"
    gc.collect()  # close the connections the in-process commands left open, then fold the WAL in
    db = sqlite3.connect(store)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = store.read_bytes()
    for broken in (data[: len(data) // 3], b"\0" * 512 + data[512:], b"garbage" * 100):
        store.write_bytes(broken)
        for wal in ("store.sqlite-wal", "store.sqlite-shm"):
            (proj / wal).unlink(missing_ok=True)
        for cmd in ("round", "leaderboard", "status"):
            code, out = cli(cmd, proj)
            assert code == 2 and out.startswith("error:") and "store" in out, (cmd, out)
            assert len([x for x in out.strip().splitlines() if not x.startswith("report: ")]) == 1, out


def test_callable_spec_imports_from_the_init_folder_wherever_round_runs(tmp_path: Path, pool: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    target, comp = make_spec("callable", home, pool)
    assert init(tmp_path, pool, target, comp)[0] == 0
    # A new session elsewhere: the module is neither imported nor importable from the path.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != home.resolve()])
    sys.modules.pop("my_seg_models", None)
    code, out = cli("round", tmp_path / "proj")
    assert code == 0 and "waiting for ratings" in out, out


def test_specs_with_options_and_without_names(tmp_path: Path, pool: Path) -> None:
    """`--target m.onnx?output=logits`: the '=' of an option is not a NAME=SPEC separator."""
    target, comp = make_spec("onnx", tmp_path, pool)
    code, out = cli("init", tmp_path / "proj", "--pool", pool, "--target", f"{target}?output=logits",
                    "--competitor", comp, "--raters", 1)
    assert code == 0, out
    p = Project.open(tmp_path / "proj")
    assert [(m.name, m.spec) for m in p.registry.models()] == [("target", f"{target}?output=logits"), ("comp", comp)]


@pytest.mark.parametrize("kind", ["factory", "hf"])
def test_trainable_own_target_with_data_fine_tunes_through_the_cli(kind: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A module:factory (+ weights=) or Hugging Face target with S0/T0: init -> round --simulate fine-tunes it
    with replay; version 1 loads through load_model with the same options; Table 1 has its row."""
    from test_rounds import own_target

    from blindspots.data.scenes import SCENE_CLASSES, generate_scene_set
    from blindspots.loop.models import load_spec

    monkeypatch.chdir(tmp_path)
    for name, n, seed, dist in (("world_pool", 12, 1, "pool"), ("train", 4, 2, "train"), ("val", 2, 3, "train")):
        generate_scene_set(tmp_path / name, n, seed=seed, distribution=dist, size=SIZE, progress=False)
    target = own_target(kind, tmp_path, monkeypatch)
    comp = save_ts(Tiny(SCENE_CLASSES.num_classes, seed=1), tmp_path / "comp.ts")
    # a second competitor as precomputed outputs of the pool: Table 1 gets its T(i) column, no T0
    # (it stopped `round` at evaluate with "keyed by image id, not pixels", after the people's work)
    rng = np.random.default_rng(2)
    (tmp_path / "pre").mkdir()
    for f in sorted((tmp_path / "world_pool" / "images").iterdir()):
        q = rng.random((SCENE_CLASSES.num_classes, SIZE, SIZE)).astype(np.float32)
        np.save(tmp_path / "pre" / (f.name + ".npy"), q / q.sum(0, keepdims=True))
    code, out = init(tmp_path, tmp_path / "world_pool" / "images", target, comp, "--competitor",
                     f"pre={tmp_path / 'pre'}", "--train-data", tmp_path / "train",
                     "--val-data", tmp_path / "val", "--ground-truth", tmp_path / "world_pool" / "masks",
                     "--rounds", 1, "--epochs", 1, "--lrs", "1e-3")
    assert code == 0, out
    code, out = cli("round", tmp_path / "proj", "--simulate")
    assert code == 0, out
    p = Project.open(tmp_path / "proj")
    rec = p.registry.model("target")
    assert rec.version == 1 and p.journal.step(0, "finetune")["status"] == "done"
    v1 = load_spec(rec.spec, import_dir=rec.meta.get("import_dir"))
    assert v1.info["kind"] == kind and "batch_size=4" in rec.spec
    from blindspots.loop import leaderboard_frame

    board = leaderboard_frame(p)  # Table 1: the target's round-1 T0 is version 1's
    assert board.loc["target", ("round 1", "T0")] == pytest.approx(rec.meta["val_miou"])
    assert np.isfinite(board.loc["target", ("round 1", "T2")])
    assert np.isfinite(board.loc["pre", ("round 0", "T1")]) and np.isnan(board.loc["pre", ("round 0", "T0")])
    code, text = cli("leaderboard", tmp_path / "proj")
    assert code == 0 and "target" in text, text


def test_photos_added_to_the_pool_between_rounds_are_one_clear_error(tmp_path: Path, pool: Path) -> None:
    """The scan's own error said "use a new out_dir", which `round` does not take: a user stuck."""
    target, comp = make_spec("onnx", tmp_path, pool)
    assert init(tmp_path, pool, target, comp)[0] == 0
    proj = tmp_path / "proj"
    assert "waiting for ratings" in cli("round", proj)[1]
    Image.open(pool / "img00.png").save(pool / "new_photo.png")
    (pool / "img01.png").unlink()
    from blindspots.loop import STEP_REGISTRY, LoopContext

    with pytest.raises(ValueError, match=r"pool.root: expected the 12 images the project's first scan read, got 1 "
                                         r"added and 1 removed since \(e.g. added \['new_photo.png'\], removed "
                                         r"\['img01.png'\]\).*or create a new project on the new pool$"):
        STEP_REGISTRY["scan"].run(LoopContext(Project.open(proj), simulate=False, progress=False), 0, 0)


def test_surprise_strategy_without_surprise_columns_says_how_to_add_them(tmp_path: Path, pool: Path) -> None:
    """`init --strategy surprise` then `round` stopped with the sampler's list of score-table columns."""
    target, comp = make_spec("torchscript", tmp_path, pool)
    assert init(tmp_path, pool, target, comp, "--strategy", "surprise")[0] == 0
    proj = tmp_path / "proj"
    code, out = cli("round", proj)
    assert code == 2 and "mining.strategy: 'surprise' expected surprise columns of 'target_v0'" in out, out
    assert "blindspots.surprise.fit_estimator" in out and f"to the scan {str(proj / 'scans')!r}" in out, out
    assert "add_surprise(estimator, name='target_v0')" in out and "the `surprise score --scan` command" in out, out
    assert "frac__" not in out, out


def test_label_plan_scoring_failure_does_not_stop_the_loop(tmp_path: Path, pool: Path, caplog) -> None:
    """Scoring T(1) is a side product of the label plan: a model that cannot be scored on it (its
    maps gone and its file overwritten by a model of 5 classes) is a warning and a failed
    `evaluate`, and `round` goes on."""
    import logging

    target, comp = make_spec("onnx", tmp_path, pool)
    assert init(tmp_path, pool, target, comp)[0] == 0
    proj = tmp_path / "proj"
    cli("round", proj)
    rate_everything_in_the_app(proj)
    assert "exported" in cli("round", proj)[1]
    assert cli("masks", "import", proj, proj / "reports" / "round-0" / "predictions")[0] == 0
    shutil.rmtree(proj / "scans" / "maps" / "comp")
    save_ts(Tiny(5, seed=1), tmp_path / "comp.ts")
    with caplog.at_level(logging.WARNING, logger="blindspots.loop.driver"):
        code, out = cli("round", proj)
    assert code == 0 and "exported for pixel labelling" in out, out
    assert "could not score the models on T(1)" in caplog.text and "the next `round` tries again" in caplog.text
    assert "failed" in cli("status", proj)[1]
    save_ts(Tiny(3, seed=1), tmp_path / "comp.ts")  # back: the next round scores T(1)
    assert cli("round", proj)[0] == 0 and "T1" in cli("leaderboard", proj)[1]


def test_init_warns_when_models_name_their_classes_differently(tmp_path: Path, pool: Path, caplog) -> None:
    """Class k is compared with class k: a target of (background, text) and a competitor of
    (background, vegetation) passed init silently. Generic class_k names are not a conflict."""
    import logging

    target, comp = make_spec("torchscript", tmp_path, pool)
    (tmp_path / "a.txt").write_text("background\nroad\ncar\n")
    (tmp_path / "b.txt").write_text("background\nsky\ntree\n")
    with caplog.at_level(logging.WARNING, logger="blindspots.loop.models"):
        assert init(tmp_path, pool, f"{target}?classes={tmp_path / 'a.txt'}", comp)[0] == 0  # comp: class_k
        assert "name their classes differently" not in caplog.text
        shutil.rmtree(tmp_path / "proj")
        assert init(tmp_path, pool, f"{target}?classes={tmp_path / 'a.txt'}",
                    f"{comp}?classes={tmp_path / 'b.txt'}")[0] == 0
    assert "name their classes differently: target: ['background', 'road', 'car']; comp: ['background', " \
           "'sky', 'tree']" in caplog.text
