"""The scan page: figures, the most disputed images, error rows; every link relative and present."""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from blindspots.data import ImagePool
from blindspots.models.adapters import CallableSegmenter
from blindspots.report import write_scan_report
from blindspots.scan import scan_pool


def make_scan(root: Path) -> Path:
    """A 12-image pool (one unreadable file), a target and two competitors that disagree on some images."""
    pool = root / "pool"
    pool.mkdir()
    rng = np.random.default_rng(0)
    for i in range(11):
        Image.fromarray(rng.integers(0, 256, (32, 40, 3), dtype=np.uint8)).save(pool / f"img_{i:02d}.png")
    (pool / "broken.png").write_bytes(b"not a png")
    t = CallableSegmenter(lambda b: (b[..., 0] > 128).astype(np.int64), 3, output="labels")
    g1 = CallableSegmenter(lambda b: (b[..., 1] > 128).astype(np.int64) * 2, 3, output="labels")
    g2 = CallableSegmenter(lambda b: (b[..., 0] > 100).astype(np.int64), 3, output="labels")
    return scan_pool(ImagePool(pool), {"t": t, "g_one": g1, "g_two": g2}, root / "scan", target="t",
                     progress=False, shard_size=5)


@pytest.fixture(scope="module")
def scan_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_scan(tmp_path_factory.mktemp("scanreport"))


def test_scan_page_has_every_section_and_only_local_files(scan_dir: Path, tmp_path: Path):
    index = write_scan_report(scan_dir, tmp_path / "rep", n_disputed=4)
    html = index.read_text()
    for heading in ("Confidence per model", "Disagreement of the target", "Predicted class mix",
                    "Most disputed images", "Errors (1)"):
        assert heading in html
    assert "broken.png" in html  # the error row and its message
    srcs = re.findall(r'src="([^"]+)"', html)
    assert len(srcs) >= 5 + 4 * 4  # figures + 4 picks x (image + 3 maps)
    for src in srcs:
        assert not src.startswith(("/", "http", "file:")) and (tmp_path / "rep" / unquote(src)).is_file()
    for name in ("entropy", "maxprob", "disagreement_pixel", "disagreement_miou", "class_mix"):
        assert Image.open(tmp_path / "rep" / "figures" / f"{name}.png").size[0] > 100
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["n_error"] == 1 and summary["n_ok"] == 11 and len(summary["disputed"]) == 4
    assert "http" not in html.replace("http-equiv", "")


def test_scan_page_cli_and_bad_input(scan_dir: Path, tmp_path: Path):
    from blindspots.cli import app

    res = CliRunner().invoke(app, ["report", str(scan_dir), "--out", str(tmp_path / "cli"), "-n", "2"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "cli" / "index.html").is_file() and "report:" in res.output
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "error" in res.output
    with pytest.raises(ValueError, match="n_disputed"):
        write_scan_report(scan_dir, tmp_path / "x", n_disputed=-1)
