"""`blindspots surprise fit|score|analyze|view` end to end on a tiny zoo checkpoint."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from blindspots.cli import app
from blindspots.data.classes import Classes

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    from blindspots.models.zoo import build_model, save_checkpoint

    root = tmp_path_factory.mktemp("sa_cli")
    torch.manual_seed(0)
    ckpt = save_checkpoint(root / "m.pt", build_model("small_fcn", 3), arch="small_fcn",
                           classes=Classes(("a", "b", "c")))
    rng = np.random.default_rng(0)
    (root / "images").mkdir()
    (root / "masks").mkdir()
    for i in range(6):
        img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        Image.fromarray(img).save(root / "images" / f"im{i}.png")
        Image.fromarray((img[..., 0] // 86).astype(np.uint8), mode="L").save(root / "masks" / f"im{i}.png")
    (root / "images_bad").mkdir()
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(root / "images_bad" / f"p{i}.png")
    (root / "images_bad" / "broken.png").write_bytes(b"not an image")
    return root, ckpt


def test_fit_score_analyze_view(workspace):
    root, ckpt = workspace
    runner = CliRunner()
    est = root / "sa" / "mdsa.npz"
    r = runner.invoke(app, ["surprise", "fit", str(ckpt), "--images", str(root / "images"), "--masks",
                            str(root / "masks"), "--out", str(est), "--per-class", "30"])
    assert r.exit_code == 0, r.output
    assert est.is_file() and est.with_suffix(".json").is_file()
    r = runner.invoke(app, ["surprise", "fit", str(ckpt), "--images", str(root / "images"), "--masks",
                            str(root / "masks"), "--out", str(root / "sa" / "lsa.npz"), "--kind", "lsa",
                            "--per-class", "30"])
    assert r.exit_code == 0, r.output

    table = root / "scores.parquet"
    r = runner.invoke(app, ["surprise", "score", str(root / "images_bad"), "-e", str(est), "-o", str(table),
                            "--name", "fcn", "--per-class", "50"])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(table)
    assert len(df) == 4 and (df["status"] == "error").sum() == 1
    assert np.isfinite(df.loc[df.status == "ok", "surprise_mdsa__fcn"]).all()

    # the same columns added to a scan's score table (extra part, joined by read_score_table)
    from blindspots.data import ImagePool
    from blindspots.models.load import load_model
    from blindspots.scan import read_score_table, scan_pool

    scan = scan_pool(ImagePool(root / "images_bad"), {"fcn": load_model(str(ckpt))}, root / "scan", target="fcn",
                     progress=False)
    r = runner.invoke(app, ["surprise", "score", str(root / "images_bad"), "-e", str(est), "--scan", str(scan),
                            "--name", "fcn", "--per-class", "50"])
    assert r.exit_code == 0, r.output
    st = read_score_table(scan).set_index("id")
    np.testing.assert_allclose(st.loc[df["id"], "surprise_mdsa__fcn"].to_numpy(), df["surprise_mdsa__fcn"].to_numpy(),
                               rtol=1e-6)
    r = runner.invoke(app, ["surprise", "score", str(root / "images_bad"), "-e", str(est)])
    assert r.exit_code == 2 and "exactly one" in r.output

    out = root / "analysis"
    r = runner.invoke(app, ["surprise", "analyze", "--images", str(root / "images"), "--masks", str(root / "masks"),
                            "-e", str(root / "sa" / "lsa.npz"), "-e", str(est), "-o", str(out),
                            "--group", "ab=0,1", "--group", "c=2"])
    assert r.exit_code == 0, r.output
    t3 = pd.read_csv(out / "table3.csv")
    assert t3["group"].tolist() == ["ab", "c"] and {"rho_LSA", "rho_MDSA"} <= set(t3.columns)
    assert (out / "figure9.png").stat().st_size > 1000

    r = runner.invoke(app, ["surprise", "view", str(root / "images"), "-e", str(est), "-o", str(root / "views"),
                            "--masks", str(root / "masks"), "--video", str(root / "views" / "v.mp4"), "--limit", "3",
                            "--maps", str(root / "sa_maps")])
    assert r.exit_code == 0, r.output
    pngs = sorted((root / "views").glob("*.png"))
    assert len(pngs) == 3 and Image.open(pngs[0]).size == (96, 64)
    sa_maps = sorted((root / "sa_maps").glob("*.npy"))  # the raw SA per pixel, for `blindspots fiftyone`
    assert [p.stem for p in sa_maps] == [p.stem for p in pngs]
    sa = np.load(sa_maps[0])
    assert sa.dtype == np.float32 and sa.shape == (32, 32) and np.isfinite(sa).any()
    assert (root / "views" / "v.mp4").stat().st_size > 0


def test_errors_are_reported(workspace):
    root, ckpt = workspace
    r = CliRunner().invoke(app, ["surprise", "fit", str(ckpt), "--images", str(root / "images"), "--masks",
                                 str(root / "masks"), "--out", str(root / "x.npz"), "--kind", "nope"])
    assert r.exit_code == 2 and "kind" in r.output
    r = CliRunner().invoke(app, ["surprise", "analyze", "--images", str(root / "images"), "--masks",
                                 str(root / "masks"), "-e", str(root / "missing.npz"), "-o", str(root / "a")])
    assert r.exit_code == 2 and "path" in r.output


def test_analyze_refuses_estimators_of_another_model_or_layer(workspace):
    """analyze scores every estimator with the first one's traces: one fitted on another layer was scored
    on traces it never saw, silently (same width: plausible numbers)."""
    import json
    import shutil

    root, ckpt = workspace
    est = root / "sa_layers" / "a.npz"
    r = CliRunner().invoke(app, ["surprise", "fit", str(ckpt), "--images", str(root / "images"), "--masks",
                                 str(root / "masks"), "--out", str(est), "--per-class", "20"])
    assert r.exit_code == 0, r.output
    other = est.with_name("b.npz")
    shutil.copy(est, other)
    meta = json.loads(est.with_suffix(".json").read_text())
    other.with_suffix(".json").write_text(json.dumps({**meta, "layer": "net.body.0"}))
    r = CliRunner().invoke(app, ["surprise", "analyze", "--images", str(root / "images"), "--masks",
                                 str(root / "masks"), "-e", str(est), "-e", str(other), "-o", str(root / "a2")])
    assert r.exit_code == 2 and "--estimator" in r.output and "net.body.0" in r.output, r.output
    assert not (root / "a2").exists()


def test_view_video_of_images_of_different_sizes(workspace, tmp_path):
    """Panels of photos of different sizes have different sizes; `view --video` failed with "frames:
    expected every frame of shape ..." after writing the PNGs, leaving a truncated MP4."""
    import imageio.v2 as imageio

    root, ckpt = workspace
    est = root / "sa_video" / "m.npz"
    r = CliRunner().invoke(app, ["surprise", "fit", str(ckpt), "--images", str(root / "images"), "--masks",
                                 str(root / "masks"), "--out", str(est), "--per-class", "20"])
    assert r.exit_code == 0, r.output
    rng = np.random.default_rng(1)
    pool = tmp_path / "pool"
    pool.mkdir()
    for i, (h, w) in enumerate([(40, 56), (33, 21), (48, 48)]):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(pool / f"p{i}.png")
    video = tmp_path / "v.mp4"
    r = CliRunner().invoke(app, ["surprise", "view", str(pool), "-e", str(est), "-o", str(tmp_path / "views"),
                                 "--video", str(video)])
    assert r.exit_code == 0, r.output
    sizes = [Image.open(tmp_path / "views" / f"p{i}.png").size for i in range(3)]
    assert len(set(sizes)) == 3
    frames = imageio.mimread(str(video))
    assert len(frames) == 3
    assert frames[0].shape[:2] == (max(s[1] for s in sizes), max(s[0] for s in sizes))


def test_refit_to_the_same_out_with_another_layer_collects_new_traces(workspace):
    """`surprise fit ... -o sa/x.npz` again with another --layer resumed the old traces checkpoint: the
    estimator kept the old layer's width while its .json named the new layer."""
    from blindspots.surprise.estimators import load_estimator

    root, ckpt = workspace
    est = root / "sa_refit" / "m.npz"
    args = ["surprise", "fit", str(ckpt), "--images", str(root / "images"), "--masks", str(root / "masks"),
            "--out", str(est), "--per-class", "20"]
    assert CliRunner().invoke(app, args).exit_code == 0
    d_default = load_estimator(est).n_features_in_
    r = CliRunner().invoke(app, args + ["--layer", "net.body.0"])
    assert r.exit_code == 0, r.output
    assert load_estimator(est).n_features_in_ != d_default


def test_view_skips_unreadable_images_as_score_does(workspace, tmp_path):
    """`surprise score` marks an unreadable file status=error and goes on; `surprise view` stopped at it
    ("error: broken.png: not an image") and drew nothing."""
    root, ckpt = workspace
    est = root / "sa_view_bad" / "m.npz"
    r = CliRunner().invoke(app, ["surprise", "fit", str(ckpt), "--images", str(root / "images"), "--masks",
                                 str(root / "masks"), "--out", str(est), "--per-class", "20"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["surprise", "view", str(root / "images_bad"), "-e", str(est), "-o",
                                 str(tmp_path / "views")])
    assert r.exit_code == 0, r.output
    assert "skipped 1 unreadable image(s): broken.png" in r.output
    assert sorted(p.name for p in (tmp_path / "views").glob("*.png")) == ["p0.png", "p1.png", "p2.png"]


def test_fit_with_features_names_the_source_not_layer_none(workspace, tmp_path):
    """`fit ... --features DIR` printed "(layer None)"."""
    root, ckpt = workspace
    feats = tmp_path / "feats"
    feats.mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        np.save(feats / f"im{i}.npy", rng.normal(size=(4, 8, 8)).astype(np.float32))
    r = CliRunner().invoke(app, ["surprise", "fit", str(ckpt), "--features", str(feats), "--images",
                                 str(root / "images"), "--masks", str(root / "masks"), "--out",
                                 str(tmp_path / "m.npz"), "--per-class", "20"])
    assert r.exit_code == 0, r.output
    assert f"(features {feats})" in r.output and "layer None" not in r.output


def test_score_scan_names_columns_after_the_scans_target(workspace, tmp_path):
    """`score --scan` without --name wrote surprise_mdsa__target: `mine -s surprise --target unet` could
    not find them, and `--target target` is refused (not a scanned model) once another model's columns
    are there too."""
    from blindspots.data import ImagePool
    from blindspots.models.load import load_model
    from blindspots.scan import read_score_table, scan_pool

    root, ckpt = workspace
    est = root / "sa_scan_name" / "m.npz"
    r = CliRunner().invoke(app, ["surprise", "fit", str(ckpt), "--images", str(root / "images"), "--masks",
                                 str(root / "masks"), "--out", str(est), "--per-class", "20"])
    assert r.exit_code == 0, r.output
    scan = scan_pool(ImagePool(root / "images_bad"), {"unet": load_model(str(ckpt))}, tmp_path / "scan",
                     target="unet", progress=False)
    r = CliRunner().invoke(app, ["surprise", "score", str(root / "images_bad"), "-e", str(est), "--scan", str(scan)])
    assert r.exit_code == 0, r.output
    cols = read_score_table(scan).columns
    assert "surprise_mdsa__unet" in cols and "surprise_mdsa__target" not in cols
    r = CliRunner().invoke(app, ["mine", str(scan), "-s", "surprise", "-n", "2", "--target", "unet", "-o",
                                 str(tmp_path / "picks"), "--no-gallery"])
    assert r.exit_code == 0, r.output


def test_score_of_an_empty_pool_says_so(workspace, tmp_path):
    """`surprise score EMPTY -o t.parquet` failed with pandas' "No objects to concatenate"."""
    root, ckpt = workspace
    est = root / "sa_empty" / "m.npz"
    r = CliRunner().invoke(app, ["surprise", "fit", str(ckpt), "--images", str(root / "images"), "--masks",
                                 str(root / "masks"), "--out", str(est), "--per-class", "20"])
    assert r.exit_code == 0, r.output
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(app, ["surprise", "score", str(tmp_path / "empty"), "-e", str(est), "-o",
                                 str(tmp_path / "t.parquet")])
    assert r.exit_code == 2 and "pool: expected images in" in r.output, r.output


@pytest.mark.parametrize("extra, message", [(["--limit", "0"], "limit (--limit): expected at least 1 image, got 0"),
                                            (["--threshold", "nan"], "threshold (--threshold): expected a finite SA value")])
def test_view_bad_limit_and_threshold(workspace, tmp_path, extra, message):
    """--limit 0 said "images: expected readable images ..., got none (0 unreadable)"; --threshold nan drew
    panels with an empty 'SA > nan' tile."""
    root, ckpt = workspace
    est = root / "sa_view_args" / "m.npz"
    if not est.is_file():
        r = CliRunner().invoke(app, ["surprise", "fit", str(ckpt), "--images", str(root / "images"), "--masks",
                                     str(root / "masks"), "--out", str(est), "--per-class", "20"])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["surprise", "view", str(root / "images"), "-e", str(est), "-o",
                                 str(tmp_path / "v")] + extra)
    assert r.exit_code == 2 and message in r.output, r.output
    assert not (tmp_path / "v").exists()


def test_score_scan_refuses_to_resume_a_part_of_another_estimator(workspace, tmp_path):
    """A second `score --scan` with another estimator (same kind, same --name) found extra/<part> complete,
    computed nothing and said "added 4 surprise columns": the old estimator's columns stayed."""
    from blindspots.data import ImagePool
    from blindspots.models.load import load_model
    from blindspots.scan import read_score_table, scan_pool

    root, ckpt = workspace
    ests = [root / "sa_parts" / "a.npz", root / "sa_parts" / "b.npz"]
    for est, per_class in zip(ests, ["20", "40"]):
        r = CliRunner().invoke(app, ["surprise", "fit", str(ckpt), "--images", str(root / "images"), "--masks",
                                     str(root / "masks"), "--out", str(est), "--per-class", per_class])
        assert r.exit_code == 0, r.output
    scan = scan_pool(ImagePool(root / "images_bad"), {"fcn": load_model(str(ckpt))}, tmp_path / "scan",
                     target="fcn", progress=False)
    score = ["surprise", "score", str(root / "images_bad"), "--scan", str(scan), "--per-class", "50"]
    assert CliRunner().invoke(app, score + ["-e", str(ests[0])]).exit_code == 0
    before = read_score_table(scan)["surprise_mdsa__fcn"].to_numpy()
    assert CliRunner().invoke(app, score + ["-e", str(ests[0])]).exit_code == 0  # same: resumes
    r = CliRunner().invoke(app, score + ["-e", str(ests[1])])
    assert r.exit_code == 2 and "--name" in r.output and "estimator_sha256" in r.output, r.output
    r = CliRunner().invoke(app, score + ["-e", str(ests[1]), "--name", "fcn_b"])
    assert r.exit_code == 0, r.output
    st = read_score_table(scan)
    np.testing.assert_array_equal(st["surprise_mdsa__fcn"].to_numpy(), before)
    assert not np.allclose(st["surprise_mdsa__fcn_b"].to_numpy(), before, equal_nan=True)
