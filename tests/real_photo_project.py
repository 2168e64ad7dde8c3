"""A project built from real photos of many sizes (scikit-image's sample photos and OpenCV's example
JPEGs, 300 px to 1280x1024, landscape, a 720x1228 portrait, gray) with two numpy callables as target and
competitor, carried to the step where S ∪ T awaits pixel labels. Shared by the real-photo app tests."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from PIL import Image

OPENCV = Path("/usr/share/doc/opencv-doc/examples/data")
TOKEN = "real-photo-ann-token"

MODELS = '''
import numpy as np

def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)

def target(images):
    """uint8 [N, H, W, 3] -> probabilities [N, 3, H, W]: the brightest colour channel wins."""
    return _softmax(images.astype(np.float32).transpose(0, 3, 1, 2) / 32.0)

def competitor(images):
    """uint8 [N, H, W, 3] -> probabilities [N, 3, H, W]: dark / mid / bright grey levels."""
    g = images.astype(np.float32).mean(axis=-1)[:, None]
    centres = np.array([40.0, 128.0, 215.0], np.float32)[None, :, None, None]
    return _softmax(-np.abs(g - centres) / 16.0)
'''


def photos() -> dict[str, np.ndarray]:
    """name -> uint8 [H, W, 3] or [H, W]: real photos of many sizes and shapes (portrait included)."""
    from skimage import data

    # few photos: MAD's candidates (and so S ∪ T) then take in the big ones too
    out = {"chelsea.png": data.chelsea(), "coins.png": data.coins()}
    if OPENCV.is_dir():
        baboon = Image.open(OPENCV / "baboon.jpg").convert("RGB")
        out["baboon_1280x1024.jpg"] = np.asarray(baboon.resize((1280, 1024)))
        out["baboon_portrait.jpg"] = np.asarray(baboon.crop((100, 0, 400, 512)).resize((720, 1228)))  # tall
        out["building.jpg"] = np.asarray(Image.open(OPENCV / "building.jpg").convert("RGB"))  # 600 x 868
        out["fruits.jpg"] = np.asarray(Image.open(OPENCV / "fruits.jpg").convert("RGB"))
    return out


def write_pool(root: Path) -> dict[str, tuple[int, int]]:
    """Write the photos under root; returns id -> (height, width)."""
    root.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for name, img in photos().items():
        Image.fromarray(img).save(root / name, quality=92)
        sizes[name] = img.shape[:2]
    return sizes


def build_until_ratings(tmp: Path) -> tuple[Path, dict[str, tuple[int, int]]]:
    """init -> round: the project waits for ratings; an annotator (TOKEN) exists. (project, sizes)."""
    from blindspots.cli import app as cli_app
    from blindspots.loop.project import Project

    sizes = write_pool(tmp / "pool")
    (tmp / "real_photo_models.py").write_text(MODELS)
    sys.path.insert(0, str(tmp))
    sys.modules.pop("real_photo_models", None)
    proj = tmp / "proj"
    cli(cli_app, "init", proj, "--pool", tmp / "pool", "--target", "target=real_photo_models:target",
        "--competitor", "comp=real_photo_models:competitor", "--n3", 3, "--n4", 4, "--raters", 1,
        "--test-size", 3)
    cli(cli_app, "round", proj)
    Project.open(proj).answers.add_annotator("ann", TOKEN)
    return proj, sizes


def finish_ratings(proj: Path, sizes: dict[str, tuple[int, int]]) -> None:
    """Rate every candidate through the app, then `round`: S ∪ T awaits masks."""
    from fastapi.testclient import TestClient

    from blindspots.app import create_app
    from blindspots.cli import app as cli_app

    client = TestClient(create_app(proj))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    queue = client.get("/api/ratings/queue", headers=auth).json()
    for item in queue["items"]:  # the biggest photos rated worst: S (lowest MOS) gets them
        score = 1 if max(sizes[item["id"]]) > 1000 else 4
        r = client.post("/api/ratings", json={"round": 0, "image_id": item["id"], "score": score}, headers=auth)
        assert r.status_code == 200, r.text
    cli(cli_app, "round", proj)


def build(tmp: Path) -> tuple[Path, dict[str, tuple[int, int]]]:
    """init -> round -> rate everything in the app -> round: S ∪ T awaits masks. (project, sizes)."""
    proj, sizes = build_until_ratings(tmp)
    finish_ratings(proj, sizes)
    return proj, sizes


def cli(app: object, *args: object) -> str:
    """Run the CLI in-process; asserts exit code 0, returns the output."""
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.output

def attach_review_set(proj: Path, ids: list[str]) -> str:
    """A label-issue review set "photos" of the given pool photos (mixed sizes): the target's map as
    the given label, the competitor's (smoothed one-hot) as the prediction; returns its name."""
    from blindspots.app.tables import AppStore
    from blindspots.labels.review import review_label_issues
    from blindspots.loop.project import Project
    from blindspots.scan.layout import find_map

    project = Project.open(proj)
    out = proj.parent / "review_photos"
    (out / "masks").mkdir(parents=True, exist_ok=True)
    (out / "predictions").mkdir(exist_ok=True)
    given, probs = [], []
    for i in ids:
        g = np.asarray(Image.open(find_map(project.scan_dir, "target_v0", i)))
        p = np.asarray(Image.open(find_map(project.scan_dir, "comp", i)))
        given.append(g.astype(np.int64))
        probs.append(np.where(np.arange(3)[:, None, None] == p[None], 0.9, 0.05).astype(np.float32))
        Image.fromarray(g, mode="L").save(out / "masks" / f"{i}.png")
        Image.fromarray(p, mode="L").save(out / "predictions" / f"{i}.png")
    batches = [(g[None], p[None]) for g, p in zip(given, probs)]  # mixed sizes: one batch per image
    rev = review_label_issues(batches, ids=ids, verbose=False, min_area=64)
    rev.images.to_csv(out / "images.csv", index=False)
    rev.regions.to_csv(out / "regions.csv", index=False)
    meta = {"images": str(Path(project.config.pool.root).resolve()), "masks": str((out / "masks").resolve()),
            "predictions": str((out / "predictions").resolve())}
    AppStore(project).attach_set("review", "photos", out, meta)
    return "photos"
