"""Algorithm 1 as a resumable state machine: every step, human waits, crash + resume, seeds."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from blindspots.config import (Config, DataSettings, FinetuneSettings, MiningSettings, ModelSettings, PoolSettings,
                               ProjectSettings, RatingSettings, ScanSettings, SimulateSettings)
from blindspots import config as C
from blindspots import loop as bl
from blindspots.loop.steps import class_ranges
from blindspots.loop.project import Project, ProjectError
from hf_helpers import tiny_segformer

torch.set_num_threads(1)
SIZE = 32


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Scenes (pool with held-out truth, S0, T0) and three untrained zoo models of different design."""
    from blindspots.data.scenes import SCENE_CLASSES, generate_scene_set
    from blindspots.training.segmentation import train_segmenter
    from blindspots.models.zoo import build_model, save_checkpoint

    root = tmp_path_factory.mktemp("world")
    generate_scene_set(root / "pool", 40, seed=1, distribution="pool", size=SIZE, progress=False)
    s0 = generate_scene_set(root / "train", 8, seed=2, distribution="train", size=SIZE, progress=False)
    generate_scene_set(root / "val", 4, seed=3, distribution="train", size=SIZE, progress=False)
    for k, (name, arch) in enumerate(model_archs().items()):
        torch.manual_seed(k)
        # A few quick epochs, so that predictions vary and MAD finds disagreements.
        model = build_model(arch, SCENE_CLASSES.num_classes)
        train_segmenter(model, s0, epochs=3, batch_size=4, seed=k, progress=False)  # in place
        save_checkpoint(root / f"{name}.pt", model, arch=arch, classes=SCENE_CLASSES, meta={"test": True})
    return root


def model_archs() -> dict[str, str]:
    """Light zoo members of different design (a U-Net target, an FCN and an LR-ASPP)."""
    return {"target": "tiny_unet", "comp_a": "small_fcn", "comp_b": "lraspp_mnv3"}


def make_config(world: Path, *, seed: int = 0, strategy: str = "mad", n_rounds: int = 1) -> Config:
    return Config(
        pool=PoolSettings(root=str(world / "pool" / "images")),
        target=ModelSettings("target", str(world / "target.pt")),
        competitors=[ModelSettings("comp_a", str(world / "comp_a.pt")), ModelSettings("comp_b", str(world / "comp_b.pt"))],
        data=DataSettings(train=str(world / "train"), val=str(world / "val")),
        project=ProjectSettings(seed=seed, rounds=n_rounds),
        scan=ScanSettings(batch_size=8, shard_size=16),
        mining=MiningSettings(strategy=strategy, n3=2, quantiles=[0.0, 1.0]),
        ratings=RatingSettings(n4=3, raters=2), testset=C.TestSetSettings(size=4, max_per_class=2),
        finetune=FinetuneSettings(lrs=[1e-3, 1e-2], epochs=1, batch_size=2, max_replay=4),
        simulate=SimulateSettings(ground_truth=str(world / "pool" / "masks"), ood_share=0.1),
        base_dir=world)


def selections(p: Project, n_rounds: int) -> dict:
    return {(i, k): list(p.answers.candidates(i, k)["id"]) for i in range(n_rounds + 1) for k in "MST"}


def test_simulated_rounds_run_to_the_end_and_fill_table_1(world: Path, tmp_path: Path) -> None:
    p = Project.create(tmp_path / "p", make_config(world))
    st = bl.advance(p, simulate=True, progress=False)
    assert st.finished, st.message
    steps = p.journal.steps()
    assert set(steps["status"]) == {"done"} and len(steps) == 2 * len(bl.STEPS)
    assert steps["seed"].notna().all()
    # One fine-tuning round: the target has a version 1, registered with its checkpoint and LR.
    rec = p.registry.model("target")
    assert rec.version == 1 and rec.path.is_file() and rec.meta["lr"] in (1e-3, 1e-2)
    # Competitors were scanned once; round 1 reused them and scanned only target_v1.
    assert p.journal.step(1, "scan")["result"]["scanned"] == ["target_v1"]
    assert p.journal.step(1, "scan")["result"]["reused"] == ["comp_a", "comp_b"]
    # M, S and T: S are the lowest-MOS images of M, T ⊂ M avoids S(1) in round 1, last round has no S.
    m0, s0, t0 = (p.answers.candidates(0, k) for k in "MST")
    assert 0 < len(s0) <= 3 and set(s0["id"]) <= set(m0["id"]) and set(t0["id"]) <= set(m0["id"])
    assert len(p.answers.candidates(1, "S")) == 0
    assert not set(p.answers.candidates(1, "T")["id"]) & set(s0["id"])
    # Round 1 mines among images not labelled yet: no pixel label is paid twice, no test image trained on.
    assert not set(p.answers.candidates(1, "M")["id"]) & (set(s0["id"]) | set(t0["id"]))
    mos = p.answers.ratings_for_round(0).groupby("id")["score"].mean()
    worst_rest = mos.drop(index=list(s0["id"]), errors="ignore")
    assert mos[list(s0["id"])].max() <= worst_rest[np.isfinite(worst_rest)].min()
    # Masks for S ∪ T of each round; the leaderboard has the layout of Table 1.
    assert set(p.answers.masks_for_round(0)["id"]) == set(s0["id"]) | set(t0["id"])
    board = bl.leaderboard_frame(p)
    assert list(board.index) == ["comp_a", "comp_b", "target"]
    assert [c for c in board.columns if c[1] != "role"] == [("round 0", "T0"), ("round 0", "T1"),
                                                            ("round 1", "T0"), ("round 1", "T2")]
    # Competitors keep their T0 score; the target's round-1 T0 is its fine-tuned version's.
    assert board.loc["comp_a", ("round 0", "T0")] == board.loc["comp_a", ("round 1", "T0")]
    assert board.loc["target", ("round 1", "T0")] == pytest.approx(rec.meta["val_miou"])
    assert (p.path / "reports" / "leaderboard.txt").is_file()
    assert bl.advance(p, simulate=True, progress=False).finished  # nothing left to do


def test_crash_mid_round_then_rerun_gives_the_same_selections(world: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    ref = Project.create(tmp_path / "ref", make_config(world, seed=5))
    assert bl.advance(ref, simulate=True, progress=False).finished
    p = Project.create(tmp_path / "crash", make_config(world, seed=5))
    real = bl.STEP_REGISTRY["select"]
    calls = {"n": 0}

    class CrashAfterWriting(type(real)):  # type: ignore[misc]
        def run(self, ctx: bl.LoopContext, i: int, seed: int) -> dict:
            out = real.run(ctx, i, seed)
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("injected crash")
            return out

    monkeypatch.setitem(bl.STEP_REGISTRY, "select", CrashAfterWriting())
    with pytest.raises(RuntimeError, match="injected"):
        bl.advance(p, simulate=True, progress=False)
    assert p.journal.step(0, "select")["status"] == "running"
    p2 = Project.open(p.path)  # as a new process would
    assert bl.advance(p2, simulate=True, progress=False).finished
    assert selections(p2, 1) == selections(ref, 1)
    pd.testing.assert_frame_equal(ref.answers.ratings_for_round(0).drop(columns="time"),
                                  p2.answers.ratings_for_round(0).drop(columns="time"))


def test_human_answers_via_csv_and_mask_folder(world: Path, tmp_path: Path) -> None:
    from PIL import Image

    p = Project.create(tmp_path / "h", make_config(world))
    st = bl.advance(p, progress=False)
    assert st.state == "awaiting_ratings" and st.round == 0 and st.total == 2 * len(p.answers.candidates(0, "M"))
    assert set(st.awaited) == set(p.answers.candidates(0, "M")["id"])
    assert "ratings" in st.message and "blindspots" not in st.message  # a status, not a shell command
    assert [a.kind for a in st.next] == ["rate", "import_ratings", "advance"]
    assert st.next[1].as_command(p.path) == f"blindspots ratings import {p.path} FILE.csv"
    assert st.next[1].as_call() == "project.import_ratings('FILE.csv')"
    assert bl.advance(p, progress=False).state == "awaiting_ratings"  # still waiting, nothing lost
    ids = list(p.answers.candidates(0, "M")["id"])
    csv = tmp_path / "ratings.csv"
    rows = [f"{x},ann{r},{1 + (k + r) % 5}" for k, x in enumerate(ids) for r in range(2)]
    csv.write_text("image_id,rater,score\n" + "\n".join(rows[:-1]) + "\n")
    bl.import_ratings(p, csv)
    st = bl.advance(p, progress=False)
    assert st.state == "awaiting_ratings" and st.awaited == [ids[-1]]
    csv.write_text(f"image_id,rater,score\n{ids[-1]},ann1,ood\n")
    bl.import_ratings(p, csv)  # one out-of-domain answer settles an image
    st = bl.advance(p, progress=False)
    assert st.state == "awaiting_masks"
    need = bl.masks_needed(p, 0)
    assert set(st.awaited) == set(need) and ids[-1] not in need
    folder = tmp_path / "masks"
    folder.mkdir()
    for x in need:
        gt = np.asarray(Image.open(world / "pool" / "masks" / x))
        Image.fromarray(gt).save(folder / x)
    (folder / "not_a_candidate.png").write_bytes(b"")
    flat = tmp_path / "flat"  # masks exported under other names: an error, not "imported 0 masks"
    (flat / "sub").mkdir(parents=True)
    Image.fromarray(np.asarray(Image.open(folder / need[0]))).save(flat / "sub" / need[0])
    with pytest.raises(ValueError, match=r"named like round 0's image ids .* got none of the .* 1 other PNGs"):
        bl.import_masks(p, flat)
    with pytest.raises(ValueError, match="holds no PNG"):
        bl.import_masks(p, _empty_dir(tmp_path / "empty"))
    assert bl.import_masks(p, folder, annotator="ann0") == len(need)
    assert bl.advance(p, progress=False, max_steps=1).state == "paused"
    assert p.journal.step(0, "masks")["status"] == "done"
    with pytest.raises(ValueError, match="other image ids"):
        csv.write_text("image_id,rater,score\nnope.png,ann1,3\n")
        bl.import_ratings(p, csv, round=0)


def _empty_dir(path: Path) -> Path:
    path.mkdir()
    return path


def test_seeds_drive_the_selections(world: Path, tmp_path: Path) -> None:
    def project(seed: int, name: str) -> Project:
        p = Project.create(tmp_path / name, make_config(world, seed=seed, strategy="random"))
        bl.advance(p, simulate=True, progress=False, max_steps=2)  # scan, mine
        return p

    a, c = project(1, "a"), project(2, "c")
    picks_a = list(a.answers.candidates(0, "M")["id"])
    assert picks_a != list(c.answers.candidates(0, "M")["id"])
    # Mining again with the recorded seed reproduces the selection exactly.
    ctx = bl.LoopContext(a, simulate=False, progress=False)
    bl.STEP_REGISTRY["mine"].run(ctx, 0, a.journal.step(0, "mine")["seed"])
    assert list(a.answers.candidates(0, "M")["id"]) == picks_a
    assert bl.step_seed(1, 0, "mine") == bl.step_seed(1, 0, "mine") != bl.step_seed(1, 1, "mine")


def test_inconsistent_project_is_reported(world: Path, tmp_path: Path) -> None:
    import shutil

    cfg = make_config(world)
    shutil.copy(world / "comp_b.pt", tmp_path / "comp_b.pt")
    cfg.competitors[1].path = str(tmp_path / "comp_b.pt")
    p = Project.create(tmp_path / "bad", cfg)
    (tmp_path / "comp_b.pt").unlink()
    with pytest.raises(ProjectError, match="comp_b.*checkpoint"):
        Project.open(p.path)
    with pytest.raises(ProjectError, match="checkpoint"):
        bl.advance(p, simulate=True, progress=False)  # a project opened earlier fails clearly too
    cfg = make_config(world)
    cfg.simulate.ground_truth = ""
    q = Project.create(tmp_path / "nogt", cfg)
    with pytest.raises(ProjectError, match="simulate.ground_truth"):
        bl.advance(q, simulate=True, progress=False)
    assert q.journal.step(0, "scan")["status"] == "done" and q.journal.step(0, "ratings")["status"] == "running"
    # The step that raised is recorded as failed (status says so) and is run again next time.
    st = bl.status(q)
    assert st.state == "failed" and "simulate.ground_truth" in st.message and "retry" in st.message


def test_without_labels_the_label_plan_mines_from_pool_predictions(world: Path, tmp_path: Path) -> None:
    """No S0/T0: class ranges are the quartiles of the target's own argmax areas on the pool, the
    round stops at ratings, and after simulated ratings S ∪ T is exported instead of fine-tuning."""
    from PIL import Image

    from blindspots.mine.samplers.mad import class_area_ranges

    cfg = make_config(world)
    cfg.data.train = cfg.data.val = ""
    cfg.mining.quantiles = [0.25, 0.75]
    p = Project.create(tmp_path / "p", cfg)
    assert bl.plan(p) == bl.LABEL_STEPS and "no training data" in bl.LoopContext(p, simulate=False, progress=False).blocker
    st = bl.advance(p, progress=False)
    assert st.state == "awaiting_ratings", st.message
    maps = sorted((p.scan_dir / "maps" / "target_v0").glob("*.png"))
    assert len(maps) == 40
    k = bl.LoopContext(p, simulate=False, progress=False).classes.num_classes
    want = class_area_ranges((np.asarray(Image.open(m)) for m in maps), k, ignore_index=None)
    got = class_ranges(bl.LoopContext(p, simulate=False, progress=False))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    st = bl.advance(p, simulate=True, progress=False)
    assert st.state == "exported" and "cannot fine-tune" not in st.message and "no training data" in st.message
    assert p.journal.step(0, "export")["status"] == "done" and p.journal.step(0, "finetune") is None
    assert len(p.answers.candidates(0, "S")) > 0 and (p.reports_dir / "round-0" / "S.csv").is_file()
    assert bl.advance(p, simulate=True, progress=False).message == st.message  # stays stopped


def test_loop_and_mine_pick_the_same_from_a_pool_with_duplicates(world: Path, tmp_path: Path) -> None:
    """One rule for exact duplicates: the loop's MAD (class ranges from the target's pool predictions)
    and `mine_scan` on the loop's own scan count each image once, so ranges and picks agree."""
    import shutil

    from blindspots.mine import mine_scan
    from blindspots.mine.samplers.mad import class_area_ranges_from_table
    from blindspots.scan import read_score_table

    src = world / "pool" / "images"
    pool = tmp_path / "pool"
    shutil.copytree(src, pool)
    files = sorted(f for f in src.rglob("*") if f.is_file())
    for k, f in enumerate(files[:12]):  # 12 copies, some twice, so copies would shift the quartiles
        shutil.copy(f, pool / f"copy_{k}{f.suffix}")
        if k % 3 == 0:
            shutil.copy(f, pool / f"copy_{k}_again{f.suffix}")
    cfg = make_config(world)
    cfg.pool.root = str(pool)
    cfg.data.train = cfg.data.val = ""
    cfg.mining.quantiles = [0.25, 0.75]
    p = Project.create(tmp_path / "p", cfg)
    assert bl.advance(p, progress=False).state == "awaiting_ratings"
    ctx = bl.LoopContext(p, simulate=False, progress=False)
    table = read_score_table(p.scan_dir)
    assert table["content_hash"].duplicated().sum() == 16
    loop_ranges = class_ranges(ctx)
    mine_ranges = class_area_ranges_from_table(table, "target_v0", num_classes=ctx.classes.num_classes)
    np.testing.assert_array_equal(loop_ranges, mine_ranges)
    # counting every copy would give other quartiles for this pool (the test sees a difference)
    ok = table.assign(content_hash=None)
    assert not np.allclose(class_area_ranges_from_table(ok, "target_v0", num_classes=ctx.classes.num_classes),
                           loop_ranges, equal_nan=True)
    loop_picks = list(p.answers.candidates(0, "M")["id"])
    picks = mine_scan(p.scan_dir, "mad", None, target="target_v0", n3=cfg.mining.n3,
                      distance=cfg.mining.distance)
    assert loop_picks and loop_picks == list(picks["id"])
    assert picks["content_hash"].is_unique


def test_scenario_strategy_mines_near_round_0s_failures(world: Path, tmp_path: Path) -> None:
    # Round 0 has no confirmed failures yet and mines with MAD; round 1 groups S(1) into failure
    # scenarios (scenarios/segmentation.py) and mines the pool images nearest them.
    p = Project.create(tmp_path / "p", make_config(world, strategy="scenario"))
    st = bl.advance(p, simulate=True, progress=False)
    assert st.finished, st.message
    m0, m1, s0 = p.answers.candidates(0, "M"), p.answers.candidates(1, "M"), p.answers.candidates(0, "S")
    assert len(m0) and len(m1) and len(s0) >= 2
    assert not set(m1["id"]) & set(s0["id"])  # confirmed failures are not mined again
    assert "scenario" in str(m1.iloc[0].to_dict())  # the reason names the scenario


FACTORY_MODULE = '''
import torch

class Net(torch.nn.Module):
    def __init__(self, c=3):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, int(c), 3, padding=1)

    def forward(self, x):
        return self.conv(x)

def build(c=3):
    return Net(c)
'''


def own_target(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A trainable target that is not a zoo checkpoint: `module:factory?weights=` or a tiny SegFormer."""
    import sys

    from blindspots.data.scenes import SCENE_CLASSES

    c = SCENE_CLASSES.num_classes
    torch.manual_seed(0)
    if kind == "factory":
        (tmp_path / "my_ft_factory.py").write_text(FACTORY_MODULE)
        sys.modules.pop("my_ft_factory", None)
        monkeypatch.syspath_prepend(str(tmp_path))
        torch.save({f"conv.{k}": v for k, v in torch.nn.Conv2d(3, c, 3, padding=1).state_dict().items()},
                   tmp_path / "w0.pt")
        return f"my_ft_factory:build?weights={tmp_path / 'w0.pt'}&c={c}&batch_size=4"
    tiny_segformer(SCENE_CLASSES.names).save_pretrained(tmp_path / "segformer")
    return str(tmp_path / "segformer") + "?batch_size=4"


@pytest.mark.parametrize("kind", ["factory", "hf"])
def test_factory_and_hf_targets_fine_tune_into_a_loadable_version_1(kind: str, world: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from blindspots.loop.models import load_spec
    from blindspots.models import load_model

    spec = own_target(kind, tmp_path, monkeypatch)
    cfg = replace(make_config(world), target=ModelSettings("target", spec), base_dir=tmp_path)
    p = Project.create(tmp_path / "p", cfg)
    assert bl.plan(p) == bl.STEPS and bl.LoopContext(p, simulate=False, progress=False).blocker is None
    st = bl.advance(p, simulate=True, progress=False)
    assert st.finished, st.message
    rec = p.registry.model("target")
    assert rec.version == 1 and rec.meta["lr"] in (1e-3, 1e-2)
    # Saved in the form the same spec kind loads back, with the spec's other options kept.
    v1 = load_spec(rec.spec, import_dir=rec.meta.get("import_dir")) if kind == "factory" else load_model(rec.spec)
    assert v1.info["kind"] == kind and v1.policy == load_model(spec).policy
    assert "batch_size=4" in rec.spec and rec.spec != spec
    if kind == "factory":
        assert "c=" in rec.spec and (p.path / "checkpoints" / "target-v1.pt").is_file()
    else:
        assert (p.path / "checkpoints" / "target-v1" / "config.json").is_file()
    # Its weights are the fine-tuned ones: the fine-tuner's T0 mIoU, measured again on the loaded v1.
    from blindspots.training.replay import evaluate_module

    val = bl.LoopContext(p, simulate=True, progress=False).labelled_set("val")
    miou = evaluate_module(v1.module, val, v1.num_classes, preprocess=v1.preprocess, output_key=v1.output_key)
    assert miou == pytest.approx(rec.meta["val_miou"], abs=1e-9)
    board = bl.leaderboard_frame(p)
    assert board.loc["target", ("round 1", "T0")] == pytest.approx(rec.meta["val_miou"])
    assert np.isfinite(board.loc["target", ("round 1", "T2")])


def test_fine_tuning_on_a_pool_of_mixed_sizes(world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """S from a real pool has many sizes (each image and its truth resized here); round 0 fine-tunes."""
    import shutil
    from dataclasses import replace

    from PIL import Image

    pool = tmp_path / "pool"
    shutil.copytree(world / "pool", pool)
    sizes = [(48, 32), (32, 64), (40, 40), (32, 32)]  # (width, height)
    for k, f in enumerate(sorted((pool / "images").iterdir())):
        size = sizes[k % len(sizes)]
        Image.open(f).resize(size, Image.BILINEAR).save(f)
        mask = next((pool / "masks").glob(f.stem + ".*"))
        Image.open(mask).resize(size, Image.NEAREST).save(mask)
    cfg = make_config(world)
    cfg = replace(cfg, pool=PoolSettings(root=str(pool / "images")), target=ModelSettings("target", own_target(
        "factory", tmp_path, monkeypatch)), simulate=replace(cfg.simulate, ground_truth=str(pool / "masks")),
                  ratings=replace(cfg.ratings, n4=4), base_dir=tmp_path)
    p = Project.create(tmp_path / "p", cfg)
    st = bl.advance(p, simulate=True, progress=False)
    assert st.finished, st.message
    s_sizes = {Image.open(next((pool / "images").glob(Path(x).stem + ".*"))).size for x in p.answers.candidates(0, "S")["id"]}
    assert len(s_sizes) > 1
    assert p.registry.model("target").version == 1 and np.isfinite(p.registry.model("target").meta["val_miou"])
