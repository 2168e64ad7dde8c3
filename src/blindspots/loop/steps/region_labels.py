"""The masks step with `labels.kind = "regions"`: the images of S (not in T) are labelled by regions.

For each such image the step asks about the `labels.regions_per_image` superpixels where the target
f_t^(i) disagrees most with its competitors and is least sure (`blindspots.mine.regions`), stores the
queries (`blindspots.loop.regions`) and, once every query has an answer (people on the app's region
page, or simulated people answering from the true masks), writes the image's partial mask. T keeps
whole masks: it measures the target.
"""
from __future__ import annotations

import numpy as np

from blindspots.human.regions import simulated_region_answer
from blindspots.loop import regions as store
from blindspots.loop.context import LoopContext
from blindspots.loop.maps import ground_truth, model_map
from blindspots.loop.models import predict_one
from blindspots.mine.regions import confident_labels, rank_regions, region_segments

__all__ = ["region_images", "make_queries", "simulate_answers", "finish_images"]

SIMULATED = "simulated"


def region_images(ctx: LoopContext, i: int) -> list[str]:
    """The images of S(i+1) labelled by regions: those not also in T(i+1)."""
    t = set(ctx.project.answers.candidate_ids(i, "T"))
    return [x for x in ctx.project.answers.candidate_ids(i, "S") if x not in t]


def make_queries(ctx: LoopContext, i: int, image_ids: list[str]) -> int:
    """Store the region queries of every image in `image_ids` that has none yet; returns how many
    images got queries."""
    p, lab = ctx.project, ctx.cfg.labels
    made = 0
    for image_id in image_ids:
        if store.has_queries(p, i, image_id):
            continue
        image = ctx.pool.load(image_id)
        target = predict_one(ctx.segmenter(ctx.cfg.target.name, i), image_id, image)[0]
        comps = [model_map(ctx, c.name, 0, image_id) for c in ctx.cfg.competitors]
        seg = region_segments(image, min_regions=4 * lab.regions_per_image)  # K questions: <= ~1/4 of it
        chosen = rank_regions(seg, target, comps, lab.regions_per_image)
        base = None
        if lab.fill == "confident":
            probas = [target] + [predict_one(ctx.segmenter(c.name, 0), image_id, image)[0]
                                 for c in ctx.cfg.competitors]
            base = confident_labels(probas, lab.agree, ignore_index=ctx.classes.ignore_index)
        store.save_queries(p, i, image_id, seg, chosen, base)
        made += 1
    return made


def simulate_answers(ctx: LoopContext, i: int, image_ids: list[str]) -> int:
    """Simulated people answer every open query from the true masks; returns how many answers."""
    p, n = ctx.project, 0
    for image_id in image_ids:
        open_ = store.unanswered(p, i, image_id)
        if not open_:
            continue
        truth, seg = ground_truth(ctx, image_id), store.segments(p, i, image_id)
        for q in open_:
            label = simulated_region_answer(truth, seg, q.region, ignore_index=ctx.classes.ignore_index)
            store.add_region_answer(p, i, image_id, q.region, SIMULATED, label)
            n += 1
    return n


def finish_images(ctx: LoopContext, i: int, image_ids: list[str], have: set[str]) -> list[str]:
    """Write the partial masks of the images whose queries are all answered; the ids still waiting."""
    waiting = []
    for image_id in image_ids:
        if image_id in have:
            continue
        if not store.finish_image(ctx.project, i, image_id, ignore_index=ctx.classes.ignore_index):
            waiting.append(image_id)
    return waiting


def labelled_share(masks: list[np.ndarray], ignore_index: int) -> float:
    """Share of pixels that carry a label over uint8 [H, W] masks (0 for none)."""
    total = sum(m.size for m in masks)
    return float(sum(int((m != ignore_index).sum()) for m in masks) / total) if total else 0.0
