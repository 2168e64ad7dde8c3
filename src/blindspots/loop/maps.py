"""Pixels the steps read: a model's class map of a pool image (the scan's saved map, else a
forward), the simulated humans' true masks, the labelled pairs of a round's S or T, and the
mIoU of saved maps against stored masks."""
from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

from blindspots.ids import artifact_name, find_artifact
from blindspots.loop.context import LoopContext, target_column
from blindspots.loop.models import predict_one
from blindspots.loop.project import ProjectError
from blindspots.metrics import ConfusionMatrix

# Lazy imports: torch-backed training code only (the loop starts without torch).

__all__ = ["ground_truth", "target_map", "model_map", "map_miou", "round_pairs"]


def ground_truth(ctx: LoopContext, image_id: str) -> np.ndarray:
    """uint8 [H, W] true mask of a pool image from `simulate.ground_truth` (simulated humans only)."""
    root = ctx.cfg.simulate.ground_truth
    if not root:
        raise ProjectError("simulate.ground_truth: expected a folder of true masks to simulate humans, got \"\" "
                           "(set it in blindspots.toml, or answer with real people)")
    path = find_artifact(ctx.cfg.resolve(root), image_id)
    if path is None:
        raise ProjectError(f"simulate.ground_truth: expected a mask "
                           f"{str(ctx.cfg.resolve(root) / artifact_name(image_id))!r} for image {image_id!r}, got none")
    with Image.open(path) as im:
        return np.asarray(im)


def target_map(ctx: LoopContext, i: int, image_id: str) -> np.ndarray:
    """int [H, W] class ids of the target f_t^(i) on a pool image (`model_map`)."""
    return model_map(ctx, ctx.cfg.target.name, i, image_id)


def model_map(ctx: LoopContext, name: str, version: int, image_id: str) -> np.ndarray:
    """int [H, W] class ids of model `name` (the target at `version`, a competitor at 0) on a pool
    image: its saved scan map, else a forward (by id for precomputed outputs)."""
    column = target_column(ctx.project, version) if name == ctx.cfg.target.name else name
    path = find_artifact(ctx.project.scan_dir / "maps" / column, image_id)
    if path is not None:
        with Image.open(path) as im:
            return np.asarray(im)
    proba = predict_one(ctx.segmenter(name, version), image_id, ctx.pool.load(image_id))
    return proba[0].argmax(0).astype(np.uint8)


def map_miou(ctx: LoopContext, i: int, kind: str, name: str, version: int) -> float:
    """mIoU (pixels pooled) of a model's maps against the stored masks of round i's `kind` set."""
    cm = ConfusionMatrix(ctx.classes.num_classes, ctx.classes.ignore_index)
    for image_id in ctx.project.answers.candidates(i, kind)["id"]:
        cm.update(model_map(ctx, name, version, image_id), ctx.project.answers.load_mask(i, image_id))
    return cm.mean_iou()


def round_pairs(ctx: LoopContext, i: int, kind: str, rounds: range | None = None) -> Any:
    """Labelled pairs (pool image, stored mask) of candidates `kind` over `rounds` (default: i only),
    as a `blindspots.training.replay.PairList`."""
    from blindspots.training.replay import PairList

    p = ctx.project
    ids: list[tuple[int, str]] = []
    for j in (rounds if rounds is not None else [i]):
        ids += [(j, x) for x in p.answers.candidates(j, kind)["id"]]
    lookup = {f"{j}:{x}": (j, x) for j, x in ids}
    return PairList(list(lookup), lambda key: (ctx.pool.load(lookup[key][1]), p.answers.load_mask(*lookup[key])))
