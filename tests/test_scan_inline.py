"""The local engine's inline mode (`run_local(..., inline=True)`: every step on the calling thread)
writes the same files as its reader/writer threads: equal table, md5-equal maps, the same error
rows; a model failing everywhere stops it with the same error."""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from blindspots.data import ImagePool
from blindspots.models.adapters import TorchSegmenter
from blindspots.scan import read_score_table, scan_pool
from blindspots.scan import api
from blindspots.scan.engines import local
from test_scan_errors import C, labels_by_red, mark, model, refuses_marked, write_pool

torch.set_num_threads(1)


def net(seed: int) -> TorchSegmenter:
    torch.manual_seed(seed)
    return TorchSegmenter(torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.ReLU(),
                                              torch.nn.Conv2d(6, C, 1)), C, batch_size=4)


def digests(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.md5(p.read_bytes()).hexdigest() for p in sorted((out / "maps").rglob("*"))
            if p.is_file()}


def scan(pool: Path, out: Path, inline: bool, monkeypatch, **models) -> pd.DataFrame:
    monkeypatch.setattr(api, "run_local", functools.partial(local.run_local, inline=inline))
    scan_pool(ImagePool(pool), models, out, target="t", batch_size=3, shard_size=5, progress=False)
    return read_score_table(out).sort_values("id").reset_index(drop=True)


def test_inline_equals_threads(tmp_path, monkeypatch):
    pool = tmp_path / "pool"
    ids = write_pool(pool, [(24, 32), (20, 28)] * 6)
    mark(pool / ids[2])  # a PNG: the white corner survives
    (pool / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    models = {"t": net(0), "g1": net(1), "g2": model(refuses_marked)}
    a = scan(pool, tmp_path / "threads", False, monkeypatch, **models)
    b = scan(pool, tmp_path / "inline", True, monkeypatch, **models)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert digests(tmp_path / "threads") == digests(tmp_path / "inline")
    assert (a["status"] == "error").sum() == 2  # the broken file and the refused image


def test_inline_model_failing_everywhere_stops(tmp_path, monkeypatch):
    pool = tmp_path / "pool"
    write_pool(pool, [(16, 16)] * 10)

    def always(b: np.ndarray) -> np.ndarray:
        raise RuntimeError("broken model")

    with pytest.raises(ValueError, match="failed on every image"):
        scan(pool, tmp_path / "out", True, monkeypatch, t=model(labels_by_red), g=model(always))
    assert not list((tmp_path / "out").glob("models/g/*.parquet"))


def test_a_batch_above_the_pixel_budget_is_written_before_the_next_forward(tmp_path, monkeypatch):
    """Threads with a budget below one image (every image is a batch alone, above the budget): the
    writer is waited for after each such batch, and the files equal the inline run's."""
    pool = tmp_path / "pool"
    write_pool(pool, [(24, 32), (20, 28), (24, 32), (16, 16)])
    settled = []
    real = local._settle
    monkeypatch.setattr(local, "_settle", lambda jobs, writer: (settled.append(jobs.qsize()), real(jobs, writer)))
    models = {"t": net(0), "g": net(1)}
    out = {}
    for inline in (False, True):
        monkeypatch.setattr(api, "run_local", functools.partial(local.run_local, inline=inline))
        scan_pool(ImagePool(pool), models, tmp_path / str(inline), target="t", batch_size=3, max_pixels=300,
                  shard_size=5, progress=False)
        out[inline] = read_score_table(tmp_path / str(inline)).sort_values("id").reset_index(drop=True)
    assert len(settled) == 3  # threads only: one wait per image above 300 px (16 x 16 = 256 px is not)
    pd.testing.assert_frame_equal(out[False], out[True], check_exact=True)
    assert digests(tmp_path / "False") == digests(tmp_path / "True")
