"""The one CLI error handler: a user error is one line `error: ...` on stderr and exit code 2; -v shows the traceback."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from blindspots.cli import app
from blindspots.cli.errors import one_line
from blindspots.data.classes import Classes
from blindspots.models.zoo import build_model, save_checkpoint

torch.set_num_threads(1)


@pytest.fixture()
def pool(tmp_path: Path) -> Path:
    root = tmp_path / "pool"
    root.mkdir()
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(root / "a.png")
    return root


def _assert_one_line_error(res, *needles: str) -> None:
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.output
    for needle in needles:
        assert needle in lines[0]


def test_missing_checkpoint(pool: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["scan", str(pool), "-t", f"t={tmp_path / 'missing.pt'}", "--out", str(tmp_path / "o")])
    _assert_one_line_error(res, "missing.pt")


def test_random_bytes_checkpoint(pool: Path, tmp_path: Path) -> None:
    bad = tmp_path / "x.pt"
    bad.write_bytes(np.random.default_rng(0).bytes(300))
    res = CliRunner().invoke(app, ["scan", str(pool), "-t", f"t={bad}", "--out", str(tmp_path / "o")])
    _assert_one_line_error(res, "x.pt", "checkpoint")


def test_out_is_a_file(pool: Path, tmp_path: Path) -> None:
    ckpt = save_checkpoint(tmp_path / "m.pt", build_model("tiny_unet", 3), arch="tiny_unet",
                           classes=Classes(("a", "b", "c")))
    out = tmp_path / "o"
    out.write_text("not a folder")
    res = CliRunner().invoke(app, ["scan", str(pool), "-t", f"t={ckpt}", "--out", str(out), "--no-progress"])
    _assert_one_line_error(res, str(out))


def test_verbose_shows_the_traceback(pool: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["-v", "scan", str(pool), "-t", f"t={tmp_path / 'missing.pt'}",
                                   "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and isinstance(res.exception, ValueError)  # re-raised: the runner holds the traceback


def test_one_line() -> None:
    assert one_line(ValueError("a\n  b")) == "a b"
    assert one_line(FileNotFoundError(2, "No such file or directory", "x.pt")) == "x.pt: No such file or directory"
    assert one_line(ValueError()) == "ValueError"


def test_disk_full_while_writing_maps(pool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The writer thread hits ENOSPC: the scan stops with one line naming the cause, not a traceback.
    import errno

    from blindspots.scan import maps as map_files

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "o" / "maps"))

    monkeypatch.setattr(map_files, "write_pngs", full)
    ckpt = save_checkpoint(tmp_path / "m.pt", build_model("tiny_unet", 3), arch="tiny_unet",
                           classes=Classes(("a", "b", "c")))
    res = CliRunner().invoke(app, ["scan", str(pool), "-t", f"t={ckpt}", "--out", str(tmp_path / "o"),
                                   "--no-progress"])
    _assert_one_line_error(res, "No space left on device")
