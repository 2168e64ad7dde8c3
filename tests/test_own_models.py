"""examples/own_models.py: real pretrained models from PyPI wheels on a handful of real photos ->
`blindspots scan` -> `blindspots mine` (MAD and random) -> sheets.

- person: MediaPipe selfie segmenters (.tflite) as `module:function` callables (one channel);
- text: PP-OCR text detectors as plain ONNX specs (pad, mean/std, one channel, classes file):
  needs only onnxruntime and the two rapidocr wheels (fetched once, or skipped with the reason).

Skipped with a reason when mediapipe (the runtime) is not installed, when no photo source is
installed (Debian opencv-doc or scikit-image), or when the model files cannot be had (they are
extracted from the `mediapipe==0.10.21` wheel, fetched once with `pip download` into
~/.cache/blindspots/own_models unless OWN_MODELS_DIR points at a folder that has them).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(EXAMPLES))

from own_models_lib.pool import OPENCV_DATA, _skimage_data_dir  # noqa: E402

MODEL_NAMES = ("selfie_segmentation.tflite", "selfie_segmentation_landscape.tflite")


def _photos() -> list[Path]:
    """A few real photos of different sizes (people and not), from whatever source is installed."""
    cands = [OPENCV_DATA / n for n in ("messi5.jpg", "basketball2.png", "fruits.jpg", "left06.jpg")]
    sk = _skimage_data_dir()
    if sk is not None:
        cands += [sk / n for n in ("astronaut.png", "coffee.png")]
    return [p for p in cands if p.is_file()]


@pytest.fixture(scope="module")
def models_dir():
    if importlib.util.find_spec("mediapipe") is None:
        pytest.skip("mediapipe is not installed (pip install mediapipe==1.2.2; not in the dev extras: ~350 MB with opencv)")
    d = Path(os.environ.get("OWN_MODELS_DIR", Path.home() / ".cache/blindspots/own_models/models"))
    from own_models_lib.models import prepare_models
    try:
        prepare_models(d, d.parent / "wheels", names=MODEL_NAMES)  # kept when there; writes the classes files
    except (subprocess.CalledProcessError, OSError) as e:
        pytest.skip(f"the mediapipe==0.10.21 wheel (model files) could not be fetched: {e}")
    old = os.environ.get("OWN_MODELS_DIR")
    os.environ["OWN_MODELS_DIR"] = str(d)  # for the callables in this process
    yield d
    if old is None:
        os.environ.pop("OWN_MODELS_DIR", None)
    else:
        os.environ["OWN_MODELS_DIR"] = old


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> Path:
    photos = _photos()
    if len(photos) < 3:
        pytest.skip("needs real photos: Debian opencv-doc or scikit-image")
    root = tmp_path_factory.mktemp("pool")
    for i, p in enumerate(photos):  # small copies of several sizes (fast on 2 shared cores)
        im = Image.open(p).convert("RGB")
        s = (96 + 16 * i) / max(im.size)
        im.resize((max(8, int(im.width * s)), max(8, int(im.height * s)))).save(root / (p.stem + ".png"))
    shutil.copyfile(root / (photos[0].stem + ".png"), root / "dup.png")  # an exact duplicate
    return root


def test_build_pool_many_sizes_and_exact_duplicates(tmp_path: Path) -> None:
    from own_models_lib.pool import build_pool

    if not OPENCV_DATA.is_dir():
        pytest.skip("needs Debian opencv-doc (apt-get install opencv-doc)")
    ids = build_pool(tmp_path)
    assert len(ids) >= 100 and len(set(ids)) == len(ids)
    assert len({Image.open(tmp_path / i).size for i in ids}) >= 40
    dups = [i for i in ids if i.startswith("duplicates/")]
    assert len(dups) >= 3
    for d in dups:
        name = d.split("copy_of_", 1)[1]
        original = next(i for i in ids if i.endswith("/" + name) and not i.startswith("duplicates/"))
        assert (tmp_path / d).read_bytes() == (tmp_path / original).read_bytes()


def test_callables_give_one_channel_read_as_binary_by_the_spec(models_dir: Path, pool: Path) -> None:
    from blindspots.models import load_model
    from own_models_lib.mediapipe_seg import selfie_general, selfie_landscape

    img = np.asarray(Image.open(sorted(pool.glob("*.png"))[0]))
    for fn in (selfie_general, selfie_landscape):
        p = fn(img[None])
        assert p.shape == (1, 1) + img.shape[:2] and p.dtype == np.float32
        assert p.min() >= 0.0 and p.max() <= 1.0
    classes = models_dir / "person_classes.txt"
    seg = load_model(f"own_models_lib.mediapipe_seg:selfie_general?classes={classes}")
    proba = seg.predict_proba(img[None])
    assert seg.classes.names == ("background", "person") and proba.shape == (1, 2) + img.shape[:2]
    assert np.allclose(proba[:, 1], selfie_general(img[None])[:, 0], atol=1e-5)
    assert np.allclose(proba.sum(axis=1), 1.0, atol=1e-5)


def _cli_env(models_dir: Path) -> dict[str, str]:
    import own_models as ex

    env = ex.cli_env(models_dir)  # the CLI runs from examples/: this tree's src first
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    return env


def test_scan_mine_and_sheets_end_to_end(models_dir: Path, pool: Path, tmp_path: Path) -> None:
    import own_models as ex
    from blindspots.scan import read_score_table

    env = _cli_env(models_dir)
    target, competitor = ex.task_specs("person", models_dir)
    ex.scan(pool, tmp_path / "scan", env, target, competitor, progress=False)
    table = read_score_table(tmp_path / "scan")
    ids = sorted(p.name for p in pool.glob("*.png"))
    assert sorted(table["id"]) == ids and (table["status"] == "ok").all()
    assert {"frac__selfie__1", "frac__landscape__1", "dpa__selfie__landscape"} <= set(table.columns)
    picks = ex.mine(tmp_path / "scan", tmp_path / "picks", env, n=3)
    mad, rnd = picks["mad"], picks["random"]
    assert 1 <= len(mad) <= 3 and len(rnd) == 3
    assert set(mad["id"]) | set(rnd["id"]) <= set(ids)
    assert (tmp_path / "picks" / "mad" / "index.html").is_file()
    # the exact duplicate (dup.png = the first photo) is picked at most once per strategy
    first = _photos()[0].stem + ".png"
    for p in (mad, rnd):
        assert len({"dup.png", first} & set(p["id"])) <= 1
    paths = ex.write_sheets(pool, tmp_path / "scan", mad, tmp_path / "judge", ("selfie", "landscape"))
    assert len(paths) == len(mad)
    w, h = Image.open(pool / mad["id"].iloc[0]).size
    assert Image.open(paths[0]).size == (3 * w, h)  # photo | target | competitor


TEXT_MODELS = ("ppocr_v4_det.onnx", "ppocr_v6_det_small.onnx")


@pytest.fixture(scope="module")
def text_models_dir():
    """The two PP-OCR detectors (ONNX, run by onnxruntime, a core dependency), fetched once."""
    d = Path(os.environ.get("OWN_MODELS_DIR", Path.home() / ".cache/blindspots/own_models/models"))
    from own_models_lib.models import prepare_models
    try:
        prepare_models(d, d.parent / "wheels", names=TEXT_MODELS)  # also writes the classes files
    except (subprocess.CalledProcessError, OSError) as e:
        pytest.skip(f"the rapidocr wheels (model files) could not be fetched: {e}")
    return d


def _text_image(w: int = 203, h: int = 61, text: str = "BLINDSPOTS 2026") -> Image.Image:
    """A drawn text line on white (sides not multiples of 32)."""
    from PIL import ImageDraw

    img = Image.new("RGB", (w, h), "white")
    ImageDraw.Draw(img).text((10, 20), text, fill="black", font_size=20)
    return img


def test_text_detectors_as_plain_onnx_specs_find_printed_text(text_models_dir: Path) -> None:
    """The PP-OCR detectors need no wrapper: pad, normalisation, one channel, class names are spec options."""
    import own_models as ex
    from blindspots.models import load_model

    x = np.asarray(_text_image())[None]
    for name_spec in ex.task_specs("text", text_models_dir):
        seg = load_model(name_spec.partition("=")[2])
        assert seg.classes.names == ("background", "text")
        p = seg.predict_proba(x)
        assert p.shape == (1, 2, 61, 203) and p.dtype == np.float32
        assert np.allclose(p.sum(axis=1), 1.0, atol=1e-5)
        text = p[0, 1] > 0.5
        assert text[15:45, 10:190].mean() > 0.2 and text[:8].mean() == 0.0  # on the words, not above


def test_text_detectors_scan_and_mine_from_the_shell(text_models_dir: Path, tmp_path: Path) -> None:
    """The README's two commands with ONNX specs only: `blindspots scan`, then `blindspots mine`."""
    import own_models as ex

    pool = tmp_path / "photos"
    pool.mkdir()
    _text_image().save(pool / "words.png")
    _text_image(150, 90, "OK").save(pool / "short.jpg")
    Image.new("RGB", (70, 45), (90, 140, 60)).save(pool / "blank.png")
    env = _cli_env(text_models_dir)
    target, competitor = ex.task_specs("text", text_models_dir)
    ex.scan(pool, tmp_path / "scan", env, target, competitor, progress=False)
    picks = ex.mine(tmp_path / "scan", tmp_path / "picks", env, n=2)
    assert len(picks["random"]) == 2 and set(picks["mad"]["id"]) <= {"words.png", "short.jpg", "blank.png"}
    assert (tmp_path / "picks" / "random" / "index.html").is_file()
