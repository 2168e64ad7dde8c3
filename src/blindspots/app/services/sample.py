"""A small, real sample project to try the app on (and to test and benchmark it).

`make_sample_project(path)` builds, from the project's procedural street scenes:

- a pool, S0 and T0 (`data.scenes.generate_scene_set`) and three untrained light zoo models
  (a tiny U-Net target; a small FCN and a second tiny U-Net with other weights as
  competitors; weights are random, so the predictions are poor — which is what a rater should
  see), a project (`Project.create`), and runs the real loop (`blindspots.loop.advance`, mining
  with the "random" strategy) until it waits for ratings;
- optionally a Defuse-style vote set (`scenarios.export_review` layout) of real handwritten
  digits (scikit-learn's 8x8 digits, upscaled) with a logistic-regression classifier's
  predictions (hidden from voters);
- optionally a label-issue review set: S0 with known label errors injected (a block of each
  chosen mask relabelled), reviewed by `labels.review.review_label_issues` against
  probabilities from the true masks (a stand-in for a good model); written like
  `blindspots label-issues` (images.csv, regions.csv) plus the predicted masks.

Annotators and their tokens are created as given. Nothing is downloaded.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from blindspots.app.tables import AppStore
from blindspots.config import (Config, DataSettings, FinetuneSettings, MiningSettings, ModelSettings, PoolSettings,
                               ProjectSettings, RatingSettings, ScanSettings, TestSetSettings)
from blindspots.data.scenes import SCENE_CLASSES, generate_scene_set
from blindspots.labels.review import review_label_issues
from blindspots.loop import advance as run
from blindspots.loop.project import Project

# Lazy imports: sklearn, threadpoolctl, torch (the web app starts without them).

log = logging.getLogger(__name__)


def make_sample_project(path: str | Path, *, n_pool: int = 40, size: int = 32, seed: int = 0,
                        annotators: dict[str, tuple[str, str]] | None = None, n_candidates: int = 12, raters: int = 1,
                        vote_set: bool = True, review_set: bool = True, advance: bool = True) -> "Project":
    """Build a sample project in `path` (a new folder) and return it (waiting for ratings).

    annotators: name -> (role, token). n_candidates: size of M (mined with the "random" strategy,
    since untrained models can leave MAD's content constraint with nothing to pick); raters:
    ratings needed per candidate (small, so a person can finish a round by hand).
    """
    import torch

    from blindspots.models.zoo import build_model, save_checkpoint

    root = Path(path)
    if root.exists() and any(root.iterdir()):
        raise ValueError(f"path: expected a new or empty folder, got {str(path)!r} (not empty)")
    data = root / "data"
    generate_scene_set(data / "pool", n_pool, seed=seed + 1, distribution="pool", size=size, progress=False)
    generate_scene_set(data / "train", 8, seed=seed + 2, distribution="train", size=size, progress=False)
    generate_scene_set(data / "val", 4, seed=seed + 3, distribution="train", size=size, progress=False)
    archs = {"target": "tiny_unet", "comp_a": "small_fcn", "comp_b": "tiny_unet"}  # light, fast on CPU
    for k, (name, arch) in enumerate(archs.items()):
        torch.manual_seed(seed * 10 + k)
        save_checkpoint(data / f"{name}.pt", build_model(arch, SCENE_CLASSES.num_classes), arch=arch,
                        classes=SCENE_CLASSES, meta={"sample": True, "trained": False})
    cfg = Config(
        pool=PoolSettings(root=str(data / "pool" / "images")),
        target=ModelSettings("target", str(data / "target.pt")),
        competitors=[ModelSettings(n, str(data / f"{n}.pt")) for n in ("comp_a", "comp_b")],
        data=DataSettings(train=str(data / "train"), val=str(data / "val")),
        project=ProjectSettings(name="sample", seed=seed, rounds=1),
        scan=ScanSettings(batch_size=8, shard_size=64),
        mining=MiningSettings(strategy="random", n=n_candidates, quantiles=[0.0, 1.0]),
        ratings=RatingSettings(n4=3, raters=raters), testset=TestSetSettings(size=4, max_per_class=2),
        finetune=FinetuneSettings(lrs=[1e-3], epochs=1, batch_size=2, max_replay=4),
        base_dir=root)
    project = Project.create(root / "project", cfg)
    for name, (role, token) in (annotators or {}).items():
        project.answers.add_annotator(name, token, role)
    if advance:
        run(project, progress=False)
    if vote_set or review_set:
        store = AppStore(project)
        if vote_set:
            store.attach_set("vote", "digits", make_vote_set(root / "votes", seed=seed))
        if review_set:
            folder, meta = make_review_set(root / "review", data / "train", seed=seed)
            store.attach_set("review", "s0", folder, meta)
    return project


def make_vote_set(out: Path, *, n_scenarios: int = 2, n_per: int = 5, seed: int = 0) -> Path:
    """A vote set in the `scenarios.export_review` layout from real 8x8 digits (upscaled to 28x28)."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    from blindspots.scenarios.review_set import ReviewSet, export_review

    d = load_digits()
    x, y = d.data / 16.0, d.target
    clf = LogisticRegression(max_iter=300).fit(x[:1000], y[:1000])
    rng = np.random.default_rng(seed)
    pick = rng.choice(np.arange(1000, len(y)), n_scenarios * n_per, replace=False)
    imgs = (x[pick].reshape(-1, 8, 8) * 255).astype(np.uint8)
    big = np.stack([np.asarray(Image.fromarray(im).resize((28, 28), Image.BILINEAR)) for im in imgs])[..., None]
    scen = np.repeat(np.arange(n_scenarios), n_per)
    items = pd.DataFrame({"item_id": [f"s{j:03d}-{i:03d}" for j, i in zip(scen, np.tile(np.arange(n_per), n_scenarios))],
                          "scenario": scen, "prediction": clf.predict(x[pick]).astype(np.int64)})
    review = ReviewSet(items, big, np.zeros((len(items), 2), np.float32), tuple(str(k) for k in range(10)))
    return export_review(review, out)


def make_review_set(out: Path, labelled: Path, *, n_errors: int = 3, seed: int = 0) -> tuple[Path, dict]:
    """Label-issue review set from a labelled folder (images/, masks/) with injected errors.

    Returns (folder with images.csv, regions.csv, masks/ (given, with errors), predictions/,
    meta for `AppStore.attach_set`).
    """
    rng = np.random.default_rng(seed)
    ids = sorted(p.name for p in (labelled / "masks").glob("*.png"))
    truth = np.stack([np.asarray(Image.open(labelled / "masks" / i)) for i in ids]).astype(np.int64)
    k = SCENE_CLASSES.num_classes
    given = truth.copy()
    n, h, w = truth.shape
    for i in rng.choice(n, min(n_errors, n), replace=False):  # a block relabelled: a real label error
        y0, x0 = rng.integers(0, h // 2), rng.integers(0, w // 2)
        block = given[i, y0:y0 + h // 3, x0:x0 + w // 3]
        block[:] = (block + 1 + rng.integers(0, k - 1)) % k
    probs = np.full((n, k, h, w), 0.1 / (k - 1), np.float32)
    np.put_along_axis(probs, truth[:, None], 0.9, axis=1)
    rev = review_label_issues(given, probs, ids=[i[:-4] for i in ids], verbose=False, min_area=4)
    (out / "masks").mkdir(parents=True, exist_ok=True)
    (out / "predictions").mkdir(exist_ok=True)
    for j, i in enumerate(ids):
        Image.fromarray(given[j].astype(np.uint8), mode="L").save(out / "masks" / i)
        Image.fromarray(truth[j].astype(np.uint8), mode="L").save(out / "predictions" / i)
    images = rev.images.assign(id=[f"{x}.png" for x in rev.images["id"]])
    regions = rev.regions.assign(id=[f"{x}.png" for x in rev.regions["id"]])
    images.to_csv(out / "images.csv", index=False)
    regions.to_csv(out / "regions.csv", index=False)
    meta = {"images": str((labelled / "images").resolve()), "masks": str((out / "masks").resolve()),
            "predictions": str((out / "predictions").resolve())}
    return out, meta
