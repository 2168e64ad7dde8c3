"""`surprise score --scan --engine ray` (and `add_columns(..., engine="ray")`): one Ray task per
shard on a local Ray of 2 CPUs (127.0.0.1 only) gives the local engine's extra part exactly."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # bind every Ray process to 127.0.0.1
ray = pytest.importorskip("ray")

from blindspots.cli import app  # noqa: E402
from blindspots.data.classes import Classes  # noqa: E402
from blindspots.data import ImagePool  # noqa: E402
from blindspots.models.load import load_model  # noqa: E402
from blindspots.scan import read_score_table, scan_pool  # noqa: E402

torch.set_num_threads(1)


def test_surprise_score_scan_on_ray_equals_local(tmp_path):
    from blindspots.models.zoo import build_model, save_checkpoint

    os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                                os.environ.get("PYTHONPATH", "")])  # the workers import this tree
    torch.manual_seed(0)
    ckpt = save_checkpoint(tmp_path / "m.pt", build_model("small_fcn", 3), arch="small_fcn",
                           classes=Classes(("a", "b", "c")))
    rng = np.random.default_rng(0)
    for d in ("images", "masks", "pool"):
        (tmp_path / d).mkdir()
    for i in range(6):
        img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        Image.fromarray(img).save(tmp_path / "images" / f"im{i}.png")
        Image.fromarray((img[..., 0] // 86).astype(np.uint8), mode="L").save(tmp_path / "masks" / f"im{i}.png")
    for i in range(9):
        Image.fromarray(rng.integers(0, 256, ((32, 24)[i % 2], 32, 3), dtype=np.uint8)).save(
            tmp_path / "pool" / f"p{i}.png")
    (tmp_path / "pool" / "broken.png").write_bytes(b"not an image")
    runner = CliRunner()
    est = tmp_path / "mdsa.npz"
    r = runner.invoke(app, ["surprise", "fit", str(ckpt), "--images", str(tmp_path / "images"), "--masks",
                            str(tmp_path / "masks"), "--out", str(est), "--per-class", "30"])
    assert r.exit_code == 0, r.output
    scans = {}
    for engine in ("local", "ray"):
        scans[engine] = scan_pool(ImagePool(tmp_path / "pool"), {"fcn": load_model(str(ckpt))}, tmp_path / engine,
                                  target="fcn", shard_size=4, progress=False)
        r = runner.invoke(app, ["surprise", "score", str(tmp_path / "pool"), "-e", str(est), "--scan",
                                str(scans[engine]), "--name", "fcn", "--per-class", "50", "--engine", engine])
        assert r.exit_code == 0, r.output
    assert not ray.is_initialized()  # the Ray the command started is shut down
    a, b = (read_score_table(scans[e]).sort_values("id").reset_index(drop=True) for e in ("local", "ray"))
    assert "surprise_mdsa__fcn" in a.columns and len(a) == 10
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    r = runner.invoke(app, ["surprise", "score", str(tmp_path / "pool"), "-e", str(est), "-o",
                            str(tmp_path / "x.parquet"), "--engine", "ray"])
    assert r.exit_code == 2 and "--engine" in r.output
