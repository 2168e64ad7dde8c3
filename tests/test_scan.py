"""The pool scan: statistics, the score table contract, resume after SIGKILL, competitor reuse, CLI."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from blindspots.data import ImagePool
from blindspots.metrics import map_distances
from blindspots.models.adapters import CallableSegmenter, TorchSegmenter
from blindspots.models.adapters.precomputed import PrecomputedSegmenter
from blindspots.scan import model_stats, pair_distances, read_score_table, scan_pool
from blindspots.scan.table import ScanLayout

torch.set_num_threads(1)
C = 4


def tiny_net(seed: int, num_classes: int = C) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, num_classes, 1))


def make_models(seeds=(0, 1, 2), names=("t", "g1", "g2")) -> dict:
    return {n: TorchSegmenter(tiny_net(s), C, batch_size=8) for n, s in zip(names, seeds)}


def make_pool(root: Path, n: int = 20, sizes=(32,), bad: bool = True, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        s = sizes[i % len(sizes)]
        sub = "sub/" if i % 7 == 3 else ""
        (root / sub).mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (s, s + 8, 3), dtype=np.uint8)).save(root / f"{sub}im_{i:03d}.png")
    if bad:
        (root / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    return root


# --- statistics -------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 6), h=st.integers(1, 9), w=st.integers(1, 9), seed=st.integers(0, 10**6))
def test_model_stats_invariants(n, c, h, w, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, c, h, w)).astype(np.float32) * rng.uniform(0, 10)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p = (p / p.sum(1, keepdims=True)).astype(np.float32)
    s = model_stats(p)
    np.testing.assert_array_equal(s.argmax, p.argmax(1))
    np.testing.assert_allclose(s.frac.sum(1), 1, atol=1e-5)
    np.testing.assert_allclose(s.frac[:, 0], (p.argmax(1) == 0).mean((1, 2)), atol=1e-6)
    ent = -(p * np.log(np.clip(p, 1e-30, None))).sum(1).mean((1, 2))
    np.testing.assert_allclose(s.entropy, ent, rtol=1e-4, atol=1e-5)
    assert np.all(s.entropy >= -1e-6) and np.all(s.entropy <= np.log(c) + 1e-5)
    np.testing.assert_allclose(s.maxprob, p.max(1).mean((1, 2)), rtol=1e-5)
    assert np.all(s.maxprob >= 1.0 / c - 1e-6) and np.all(s.maxprob <= 1 + 1e-6)


def test_model_stats_one_hot_has_zero_entropy():
    p = np.zeros((1, 3, 2, 2), np.float32)
    p[0, 1] = 1
    s = model_stats(p)
    assert s.entropy[0] == 0 and s.maxprob[0] == 1
    np.testing.assert_array_equal(s.frac[0], [0, 1, 0])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 4), c=st.integers(1, 5), h=st.integers(1, 8), w=st.integers(1, 8), seed=st.integers(0, 10**6))
def test_pair_distances_match_metrics_and_invariants(n, c, h, w, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, c, (n, h, w)).astype(np.uint8)
    b = rng.integers(0, c, (n, h, w)).astype(np.uint8)
    dpa, dmiou = pair_distances(a, b, c)
    ref_pa, ref_miou = map_distances(a.astype(np.int64), b.astype(np.int64), c)
    np.testing.assert_allclose(dpa, ref_pa, atol=1e-12)
    np.testing.assert_allclose(dmiou, ref_miou, atol=1e-12)
    np.testing.assert_allclose(pair_distances(b, a, c)[1], dmiou, atol=1e-12)  # symmetric
    same_pa, same_miou = pair_distances(a, a, c)
    assert np.all(same_pa == 0) and np.all(same_miou == 0)
    assert np.all((dpa >= 0) & (dpa <= 1) & (dmiou >= 0) & (dmiou <= 1))


# --- the score table ---------------------------------------------------------------------------

def test_scan_table_contract_and_values(tmp_path):
    root = make_pool(tmp_path / "pool", n=20, sizes=(32, 40))  # two image sizes -> batched per size
    pool = ImagePool(root)
    models = make_models()
    out = scan_pool(pool, models, tmp_path / "scan", target="t", batch_size=4, shard_size=8, progress=False)
    df = read_score_table(out)
    assert df["id"].tolist() == sorted(pool.ids) and len(df) == 21
    expected = ["id", "status", "error", "width", "height", "content_hash"]
    for m in ("g1", "g2", "t"):
        expected += [f"frac__{m}__{k}" for k in range(C)] + [f"entropy__{m}", f"maxprob__{m}"]
    expected += ["dpa__t__g1", "dmiou__t__g1", "dpa__t__g2", "dmiou__t__g2"]
    assert df.columns.tolist() == expected
    assert df["frac__t__0"].dtype == np.float32 and df["entropy__g1"].dtype == np.float32
    bad = df.set_index("id").loc["broken.png"]
    assert bad["status"] == "error" and isinstance(bad["error"], str) and pd.isna(bad["width"])
    assert np.isnan(bad["entropy__t"]) and np.isnan(bad["dpa__t__g1"])
    ok = df[df.status == "ok"].set_index("id")
    assert ok["error"].isna().all()
    # recompute two images directly and compare with the table and the saved maps
    layout = ScanLayout(out)
    for image_id in ["im_000.png", "sub/im_003.png", "im_001.png"]:
        img = pool.load(image_id)
        assert (ok.loc[image_id, "height"], ok.loc[image_id, "width"]) == img.shape[:2]
        maps = {}
        for name, m in models.items():
            p = m.predict_proba(img[None])
            maps[name] = p.argmax(1)
            saved = np.asarray(Image.open(layout.map_path(name, image_id)))
            np.testing.assert_array_equal(saved, maps[name][0])
            np.testing.assert_allclose(ok.loc[image_id, f"maxprob__{name}"], p.max(1).mean(), rtol=1e-4)
            np.testing.assert_allclose([ok.loc[image_id, f"frac__{name}__{k}"] for k in range(C)],
                                       [(maps[name] == k).mean() for k in range(C)], atol=1e-6)
        for g in ("g1", "g2"):
            dpa, dmiou = map_distances(maps["t"], maps[g], C)
            np.testing.assert_allclose(ok.loc[image_id, f"dpa__t__{g}"], dpa[0], atol=1e-6)
            np.testing.assert_allclose(ok.loc[image_id, f"dmiou__t__{g}"], dmiou[0], atol=1e-6)
    # a second call finds everything done and changes nothing
    before = {p: p.stat().st_mtime_ns for p in Path(out).rglob("*.parquet")}
    scan_pool(pool, models, out, target="t", batch_size=4, shard_size=8, progress=False)
    assert before == {p: p.stat().st_mtime_ns for p in Path(out).rglob("*.parquet")}


def test_new_target_reuses_competitors(tmp_path):
    pool = ImagePool(make_pool(tmp_path / "pool", n=12))
    models = make_models()
    out = tmp_path / "scan"
    scan_pool(pool, models, out, target="t", batch_size=4, shard_size=5, progress=False)
    layout = ScanLayout(out)
    comp_files = sorted((out / "models" / "g1").glob("*.parquet")) + sorted((out / "models" / "g2").glob("*.parquet"))
    stamps = [p.stat().st_mtime_ns for p in comp_files]

    def boom(_):
        raise AssertionError("a reused competitor must not be run again")
    reused = {"g1": CallableSegmenter(boom, C), "g2": CallableSegmenter(boom, C)}
    new_target = TorchSegmenter(tiny_net(7), C)
    # Competitors given as objects that must not run, and by name only: both reuse the saved maps.
    scan_pool(pool, {"t2": new_target, **reused}, out, target="t2", batch_size=4, shard_size=5, progress=False)
    assert [p.stat().st_mtime_ns for p in comp_files] == stamps
    df = read_score_table(out)
    assert {"dpa__t2__g1", "dmiou__t2__g2"} <= set(df.columns) and "dpa__t__g1" not in df.columns
    old = read_score_table(out, target="t")
    assert "dpa__t__g2" in old.columns
    # equal to a fresh scan that runs everything
    fresh = tmp_path / "fresh"
    scan_pool(pool, {"t2": TorchSegmenter(tiny_net(7), C), "g1": models["g1"], "g2": models["g2"]}, fresh,
              target="t2", batch_size=4, shard_size=5, progress=False)
    ref = read_score_table(fresh)
    pd.testing.assert_frame_equal(df[ref.columns], ref)
    assert layout.map_path("t2", "im_000.png").exists()


def test_named_competitor_only(tmp_path):
    pool = ImagePool(make_pool(tmp_path / "pool", n=6, bad=False))
    out = tmp_path / "scan"
    scan_pool(pool, make_models(), out, target="t", shard_size=4, progress=False)
    scan_pool(pool, {"t3": TorchSegmenter(tiny_net(9), C)}, out, target="t3", competitors=["g2"], shard_size=4,
              progress=False)
    df = read_score_table(out)
    assert "dpa__t3__g2" in df.columns and "dpa__t3__g1" not in df.columns
    with pytest.raises(ValueError, match="competitors: expected names of other models"):
        scan_pool(pool, {"t4": TorchSegmenter(tiny_net(9), C)}, out, target="t4", competitors=["nobody"],
                  shard_size=4, progress=False)


def test_scan_refuses_mismatched_settings_and_inputs(tmp_path):
    pool = ImagePool(make_pool(tmp_path / "pool", n=6, bad=False))
    out = tmp_path / "scan"
    models = make_models()
    scan_pool(pool, models, out, target="t", shard_size=4, progress=False)
    with pytest.raises(ValueError, match="expected the same shard_size"):
        scan_pool(pool, models, out, target="t", shard_size=3, progress=False)
    with pytest.raises(ValueError, match="expected model 'g1' to be the one already scanned"):
        scan_pool(pool, {**models, "g1": TorchSegmenter(tiny_net(5), C)}, out, target="t", shard_size=4,
                  progress=False)
    other = ImagePool(make_pool(tmp_path / "pool2", n=7, bad=False))
    with pytest.raises(ValueError, match="the pool's images changed"):
        scan_pool(other, models, out, target="t", shard_size=4, progress=False)
    with pytest.raises(ValueError, match="target: expected one of the given models"):
        scan_pool(pool, models, tmp_path / "x", target="zz")
    with pytest.raises(ValueError, match="models: expected model names"):
        scan_pool(pool, {"Bad-Name": models["t"]}, tmp_path / "x", target="Bad-Name")
    with pytest.raises(ValueError, match="equal num_classes"):
        scan_pool(pool, {"t": models["t"], "g": TorchSegmenter(tiny_net(0, 3), 3)}, tmp_path / "x", target="t")
    with pytest.raises(ValueError, match="batch_size: expected a positive integer"):
        scan_pool(pool, models, tmp_path / "x", target="t", batch_size=0)
    with pytest.raises(ValueError, match="pool: expected an ImagePool"):
        scan_pool([1, 2], models, tmp_path / "x", target="t")
    with pytest.raises(ValueError, match="out_dir: expected a scan folder"):
        read_score_table(tmp_path / "nothing")


def test_bad_model_output_stops_scan_with_clear_error(tmp_path):
    pool = ImagePool(make_pool(tmp_path / "pool", n=4, bad=False))
    nan_model = CallableSegmenter(lambda b: np.full((len(b), C) + b.shape[1:3], np.nan, np.float32), C)
    with pytest.raises(ValueError, match="expected finite values"):
        scan_pool(pool, {"t": nan_model}, tmp_path / "scan", target="t", progress=False)


def test_partial_table_and_precomputed_model_and_resize(tmp_path):
    pool = ImagePool(make_pool(tmp_path / "pool", n=9, bad=False))
    target = TorchSegmenter(tiny_net(0), C)
    folder = tmp_path / "npy"  # the "competitor" is the target's own probabilities on disk
    for image_id in pool.ids:
        (folder / image_id).parent.mkdir(parents=True, exist_ok=True)
        np.save(folder / (image_id + ".npy"), target.predict_proba(pool.load(image_id)[None])[0])
    out = scan_pool(pool, {"t": target, "pre": PrecomputedSegmenter(folder)}, tmp_path / "scan", target="t",
                    shard_size=4, progress=False)
    df = read_score_table(out)
    assert np.allclose(df["dpa__t__pre"], 0) and np.allclose(df["dmiou__t__pre"], 0)
    np.testing.assert_allclose(df["entropy__pre"], df["entropy__t"], rtol=1e-5)
    # an interrupted scan: one shard file gone -> partial read only on request
    (Path(out) / "pairs" / "t__pre" / "shard-00001.parquet").unlink()
    with pytest.raises(ValueError, match="expected a complete scan"):
        read_score_table(out)
    assert len(read_score_table(out, allow_partial=True)) == 5
    with pytest.raises(ValueError, match="resize: expected None when a model reads precomputed"):
        scan_pool(pool, {"t": target, "pre": PrecomputedSegmenter(folder)}, tmp_path / "r", target="t",
                  resize=(16, 16))
    # resize: maps at the resized resolution, width/height are the original size
    out2 = scan_pool(pool, {"t": target}, tmp_path / "resized", target="t", resize=(16, 20), progress=False)
    df2 = read_score_table(out2)
    assert (df2["height"] == 32).all() and (df2["width"] == 40).all()
    assert np.asarray(Image.open(ScanLayout(out2).map_path("t", pool.ids[0]))).shape == (16, 20)


def test_interrupt_in_process_then_resume(tmp_path):
    pool = ImagePool(make_pool(tmp_path / "pool", n=14, bad=False))
    net = TorchSegmenter(tiny_net(0), C)
    calls = {"n": 0}

    def flaky(images):
        calls["n"] += 1
        if calls["n"] == 3:  # Ctrl-C while the third batch runs
            raise KeyboardInterrupt
        return net.predict_proba(images)
    out = tmp_path / "scan"
    with pytest.raises(KeyboardInterrupt):
        scan_pool(pool, {"t": CallableSegmenter(flaky, C)}, out, target="t", batch_size=2, shard_size=4,
                  progress=False)
    done = sorted(p.name for p in (out / "models" / "t").glob("*.parquet"))
    assert done == ["shard-00000.parquet"]  # batches 1-2 = shard 0, finished and written before the interrupt
    scan_pool(pool, {"t": CallableSegmenter(net.predict_proba, C)}, out, target="t", batch_size=2, shard_size=4,
              progress=False)
    fresh = scan_pool(pool, {"t": net}, tmp_path / "fresh", target="t", batch_size=2, shard_size=4, progress=False)
    pd.testing.assert_frame_equal(read_score_table(out), read_score_table(fresh))


# --- resume after SIGKILL ----------------------------------------------------------------------

RESUME_SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np, torch
    torch.set_num_threads(1)
    from blindspots.data import ImagePool
    from blindspots.models.adapters import TorchSegmenter
    from blindspots.scan import scan_pool

    class Slow(torch.nn.Module):
        def __init__(self, seed):
            super().__init__()
            torch.manual_seed(seed)
            self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                           torch.nn.Conv2d(8, 4, 1))
        def forward(self, x):
            time.sleep(float(sys.argv[3]))  # slow enough to be killed mid-way
            return self.net(x)

    models = {name: TorchSegmenter(Slow(seed), 4, batch_size=4) for name, seed in [("t", 0), ("g1", 1), ("g2", 2)]}
    scan_pool(ImagePool(sys.argv[1]), models, sys.argv[2], target="t", batch_size=4, shard_size=8, progress=False)
""")


def _run_script(script: Path, pool: Path, out: Path, delay: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    return subprocess.Popen([sys.executable, str(script), str(pool), str(out), str(delay)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_resume_after_kill_equals_uninterrupted(tmp_path):
    pool = make_pool(tmp_path / "pool", n=60, sizes=(32,), bad=True)
    script = tmp_path / "run_scan.py"
    script.write_text(RESUME_SCRIPT)
    killed = tmp_path / "killed"
    proc = _run_script(script, pool, killed, 0.05)
    first = killed / "models" / "t" / "shard-00000.parquet"
    deadline = time.monotonic() + 120
    while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert first.exists(), proc.stderr.read().decode()[-2000:]
    n_shards = 8  # 61 ids / 8
    done = len(list((killed / "models" / "t").glob("shard-*.parquet")))
    assert done < n_shards, "the scan finished before it was killed; the test did not test resuming"
    with pytest.raises(ValueError, match="expected a complete scan"):
        read_score_table(killed)
    # restart: finishes only the missing shards
    done_before = {p: p.stat().st_mtime_ns for p in killed.rglob("shard-*.parquet")}
    resumed = _run_script(script, pool, killed, 0.0)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()[-2000:]
    assert all(p.stat().st_mtime_ns == t for p, t in done_before.items())
    # an uninterrupted run for reference
    clean = tmp_path / "clean"
    ref = _run_script(script, pool, clean, 0.0)
    assert ref.wait(timeout=300) == 0, ref.stderr.read().decode()[-2000:]
    got, want = read_score_table(killed), read_score_table(clean)
    assert len(want) == 61 and (want.status == "error").sum() == 1
    pd.testing.assert_frame_equal(got, want)
    for image_id in want.id[want.status == "ok"]:
        for m in ("t", "g1", "g2"):
            a = np.asarray(Image.open(ScanLayout(killed).map_path(m, image_id)))
            b = np.asarray(Image.open(ScanLayout(clean).map_path(m, image_id)))
            np.testing.assert_array_equal(a, b)


# --- CLI ---------------------------------------------------------------------------------------

def test_cli_scan(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from blindspots.cli import app

    pool = make_pool(tmp_path / "pool", n=5, bad=True)
    elsewhere = make_pool(tmp_path / "elsewhere", n=1, bad=False)
    (pool / "link.png").symlink_to(elsewhere / "im_000.png")  # a link out of the pool: refused
    mod = tmp_path / "scan_cli_models.py"
    mod.write_text(textwrap.dedent("""
        import numpy as np
        def red(b):
            return b[..., 0].astype(np.int64) * 3 // 256
        def green(b):
            return b[..., 1].astype(np.int64) * 3 // 256
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "scan"
    args = ["scan", str(pool), "--target", "red=scan_cli_models:red?output=labels&num_classes=3",
            "--competitor", "green=scan_cli_models:green?output=labels&num_classes=3", "--out", str(out),
            "--no-progress", "--shard-size", "2"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "scanned 7 images (2 with errors)" in res.output
    # why, without --verbose: each error row's id and reason (a link out of the pool was silent)
    assert "\n  broken.png: " in res.output and "\n  link.png: symlink pointing outside the pool root" in res.output
    df = read_score_table(out)
    assert {"dpa__red__green", "entropy__red"} <= set(df.columns)
    assert np.allclose(df.loc[df.status == "ok", "entropy__red"], 0)  # one-hot labels
    res = CliRunner().invoke(app, args[:-2] + ["--shard-size", "3"])
    assert res.exit_code == 2 and "expected the same shard_size" in res.output
    # the same model file with other options: its old maps are not kept as if they were the new ones
    changed = [a.replace("num_classes=3", "num_classes=3&max_side=16") if a.startswith("red=") else a for a in args]
    res = CliRunner().invoke(app, changed)
    assert res.exit_code == 2 and "expected model 'red' with the options it was scanned with " \
        "('num_classes=3&output=labels'), got 'max_side=16&num_classes=3&output=labels'" in res.output, res.output
    res = CliRunner().invoke(app, [a + "&batch_size=2" if a.startswith("red=") else a for a in args])
    assert res.exit_code == 0, res.output  # batch_size does not change the maps
    res = CliRunner().invoke(app, ["scan", str(pool), "--target", "nospec", "--out", str(out)])
    assert res.exit_code != 0 and "NAME=SPEC" in res.output
