"""`blindspots scan` then `blindspots mine`: picks (CSV, Parquet) and an offline gallery, end to end."""
from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from blindspots.cli import app
from cli_subprocess import imports_torch

MODELS = textwrap.dedent("""
    import numpy as np
    def red(b):
        return b[..., 0].astype(np.int64) * 3 // 256
    def green(b):
        return b[..., 1].astype(np.int64) * 3 // 256
""")


@pytest.fixture
def scanned(tmp_path, monkeypatch) -> Path:
    rng = np.random.default_rng(0)
    pool = tmp_path / "my photos"  # a space: links in the page must be encoded
    (pool / "sub").mkdir(parents=True)
    for i, (h, w) in enumerate([(111, 128), (30, 20), (64, 64), (50, 90), (200, 300), (37, 53)]):
        folder = pool / "sub" if i % 3 == 0 else pool
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / f"im {i}.jpg", quality=95)
    shutil.copy(pool / "im 1.jpg", pool / "copy.jpg")
    (pool / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnope")
    (tmp_path / "mine_cli_models.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "scan"
    res = CliRunner().invoke(app, ["scan", str(pool), "--target", "red=mine_cli_models:red?output=labels&num_classes=3",
                                   "--competitor", "green=mine_cli_models:green?output=labels&num_classes=3",
                                   "--out", str(out), "--no-progress", "--batch-size", "2"])
    assert res.exit_code == 0, res.output
    return out


def test_mine_from_scan_columns_loads_no_model(scanned, tmp_path):
    # MAD reads the scan's maps and columns: neither the models nor torch are loaded
    assert not imports_torch("mine", scanned, "--strategy", "mad", "-n", "3", "--out", tmp_path / "p",
                             cwd=scanned.parent)
    assert (tmp_path / "p" / "picks.csv").is_file()


@pytest.mark.parametrize("strategy", ["mad", "entropy", "random"])
def test_mine_writes_picks_and_an_offline_gallery(scanned, tmp_path, strategy):
    out = tmp_path / f"picks_{strategy}"
    res = CliRunner().invoke(app, ["mine", str(scanned), "--strategy", strategy, "-n", "10", "--out", str(out),
                                   "--seed", "3"])
    assert res.exit_code == 0, res.output
    csv = pd.read_csv(out / "picks.csv")
    parquet = pd.read_parquet(out / "picks.parquet")
    assert list(csv.columns[:4]) == ["rank", "id", "score", "reason"]
    assert csv["id"].tolist() == parquet["id"].tolist()
    assert 1 <= len(csv) <= 7 and "broken.png" not in set(csv["id"])
    assert not {"im 1.jpg", "copy.jpg"} <= set(csv["id"])  # exact duplicates: picked once
    assert csv["content_hash"].is_unique
    if strategy == "mad":
        assert csv["reason"].str.contains(r"red and green label (<1|\d+)% of pixels differently "
                                          r"\(ranked among the images where (red|green) shows class_\d\)").all()
    html = (out / "index.html").read_text()
    assert "http" not in html.lower() and "//" not in re.sub(r"<!DOCTYPE[^>]*>", "", html)
    srcs = [unquote(s) for s in re.findall(r'src="([^"]+)"', html)]
    assert len(srcs) == 3 * len(csv)  # image, target overlay, competitor overlay per pick
    for s in srcs:
        assert not s.startswith("/") and (out / s).is_file(), s
    for image_id in csv["id"]:
        assert image_id in html
    assert "class_0" in html and 'class="swatch"' in html
    # thumbnails keep each image's aspect ratio (mixed sizes in one pool)
    first = Image.open(out / [s for s in srcs if "/red/" in s][0])
    assert max(first.size) <= 320


def test_mine_without_gallery_and_with_bad_input(scanned, tmp_path):
    out = tmp_path / "p"
    res = CliRunner().invoke(app, ["mine", str(scanned), "-n", "3", "--out", str(out), "--no-gallery"])
    assert res.exit_code == 0, res.output
    assert (out / "picks.csv").is_file() and not (out / "index.html").exists()
    res = CliRunner().invoke(app, ["mine", str(scanned), "--strategy", "nope", "--out", str(out)])
    assert res.exit_code == 2 and "strategy: expected one of" in res.output
    res = CliRunner().invoke(app, ["mine", str(tmp_path / "nothing"), "--out", str(out)])
    assert res.exit_code == 2 and "scan_dir: expected a scan folder" in res.output
    # surprise before `surprise score --scan`: what to run (was "could not infer the model ... pass target=")
    res = CliRunner().invoke(app, ["mine", str(scanned), "--strategy", "surprise", "--out", str(out)])
    assert res.exit_code == 2 and "got none in" in res.output and "blindspots surprise score" in res.output, res.output
    # MAD on a scan of the target alone (was "competitors: expected at least one `dpa__red__{G}` column")
    solo = tmp_path / "solo"
    res = CliRunner().invoke(app, ["scan", str(tmp_path / "my photos"), "--target",
                                   "red=mine_cli_models:red?output=labels&num_classes=3", "--out", str(solo),
                                   "--no-progress"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["mine", str(solo), "--out", str(out)])
    assert res.exit_code == 2 and "'mad' compares the target with competitors, got a scan of 'red' alone" in \
        res.output and "--strategy entropy or random" in res.output, res.output


def test_mine_an_earlier_target(scanned, tmp_path):
    pool = tmp_path / "my photos"
    res = CliRunner().invoke(app, ["scan", str(pool), "--target", "blue=mine_cli_models:green?output=labels&num_classes=3",
                                   "--competitor", "green", "--out", str(scanned), "--no-progress"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "red_again"
    res = CliRunner().invoke(app, ["mine", str(scanned), "--target", "red", "-n", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    html = (out / "index.html").read_text()
    assert "red (target)" in html and "thumbs/green/" in html and "thumbs/blue/" not in html
    assert pd.read_csv(out / "picks.csv")["reason"].str.startswith("red and green").all()


def test_mine_surprise_columns(scanned, tmp_path):
    from blindspots.data import ImagePool
    from blindspots.scan.extra import add_columns

    add_columns(scanned, ImagePool(tmp_path / "my photos"), "surprise_mdsa__mine",
                lambda b: {"surprise_mdsa__mine": b.mean(axis=(1, 2, 3))}, progress=False)
    out = tmp_path / "s"
    res = CliRunner().invoke(app, ["mine", str(scanned), "--strategy", "surprise", "-n", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    picks = pd.read_csv(out / "picks.csv")
    assert len(picks) == 3 and picks["score"].is_monotonic_decreasing
    assert picks["reason"].str.startswith("mine's MDSA surprise is").all()


def test_mine_qbc_from_the_saved_maps(scanned, tmp_path):
    # no committee columns: vote entropy from the maps; two members -> log 2 x the share of pixels they differ on
    from blindspots.scan import read_score_table

    out = tmp_path / "qbc"
    res = CliRunner().invoke(app, ["mine", str(scanned), "--strategy", "qbc", "-n", "10", "--out", str(out)])
    assert res.exit_code == 0, res.output
    picks = pd.read_csv(out / "picks.csv")
    table = read_score_table(scanned).set_index("id")
    expected = np.log(2) * table.loc[picks["id"], "dpa__red__green"].to_numpy()
    np.testing.assert_allclose(picks["score"].to_numpy(), expected, rtol=1e-5)
    assert (np.diff(picks["score"].to_numpy()) <= 0).all() and len(picks) == 6  # 6 usable images, best first
    # a scan without maps: the error names the missing map and the way out
    bare = tmp_path / "bare"
    res = CliRunner().invoke(app, ["scan", str(tmp_path / "my photos"), "--target",
                                   "red=mine_cli_models:red?output=labels&num_classes=3", "--competitor",
                                   "green=mine_cli_models:green?output=labels&num_classes=3", "--out", str(bare),
                                   "--no-progress", "--no-maps"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["mine", str(bare), "--strategy", "qbc", "--out", str(tmp_path / "q2")])
    assert res.exit_code != 0 and "saved argmax map" in res.output and "CommitteeColumns" in res.output, res.output
