"""Step ``ratings`` (human): ACR ratings 1-5 or out-of-domain of f_t^(i)'s prediction for every
image of M(i+1), by `ratings.raters` raters (one out-of-domain flag settles an image)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from blindspots.human.scores import rating_answer
from blindspots.human.simulate import SimulatedRaters, image_miou
from blindspots.loop.context import LoopContext, Status
from blindspots.loop.maps import ground_truth, target_map
from blindspots.loop.next_action import RATE_ACTIONS
from blindspots.loop.progress import rating_progress
from blindspots.loop.steps.base import Step

__all__ = ["RatingsStep", "ratings_progress", "simulate_ratings"]


class RatingsStep(Step):
    """Waits until every candidate of M(i+1) has its answers (simulated raters answer with `simulate`)."""

    name = "ratings"
    human = True

    def settings(self, ctx: LoopContext) -> dict:
        return {"raters": ctx.cfg.ratings.raters, "simulate": ctx.simulate}

    def run(self, ctx: LoopContext, i: int, seed: int) -> dict | Status:
        missing, have, total = ratings_progress(ctx, i)
        if missing and ctx.simulate:
            simulate_ratings(ctx, i, missing, seed)
            missing, have, total = ratings_progress(ctx, i)
        if missing:
            prog = rating_progress(ctx.project, i)
            return Status("awaiting_ratings", i, "ratings",
                          f"round {i}: waiting for ratings of M({i + 1}) (1-5 or out-of-domain): {prog.counts()}."
                          + (f" This round cannot finish as it is: {prog.advice()}." if prog.unreachable else ""),
                          missing, have, total, next=RATE_ACTIONS)
        r = ctx.project.answers.ratings_for_round(i)
        return {"n_ratings": int(len(r)), "n_raters": int(r["annotator"].nunique()) if len(r) else 0,
                "n_out_of_domain": int(r.loc[r["out_of_domain"], "id"].nunique()) if len(r) else 0}


def ratings_progress(ctx: LoopContext, i: int) -> tuple[list[str], int, int]:
    """(ids still needing answers, answers in, answers needed) for M(i+1)."""
    ids = list(ctx.project.answers.candidates(i, "M")["id"])
    r = ctx.project.answers.ratings_for_round(i)
    need = ctx.cfg.ratings.raters
    counts = r.groupby("id").size() if len(r) else pd.Series(dtype=int)
    ood = set(r.loc[r["out_of_domain"], "id"]) if len(r) else set()
    missing = [x for x in ids if x not in ood and int(counts.get(x, 0)) < need]
    have = sum(min(int(counts.get(x, 0)), need) if x not in ood else need for x in ids)
    return missing, have, need * len(ids)


def simulate_ratings(ctx: LoopContext, i: int, ids: list[str], seed: int) -> int:
    """Simulated raters (`blindspots.human.simulate`) rate f_t^(i) on `ids` from the true IoU;
    returns how many ratings were stored."""
    s = ctx.cfg.simulate
    raters = SimulatedRaters(ctx.cfg.ratings.raters, noise=s.noise, bias_sd=s.bias, ood_share=s.ood_share,
                             seed=seed)
    k, ign = ctx.classes.num_classes, ctx.classes.ignore_index
    iou = np.array([float(image_miou(target_map(ctx, i, x), ground_truth(ctx, x), k, ignore_index=ign)[0])
                    for x in ids])
    frame = raters.rate(ids, iou).frame
    rows = [(i, x, r, rating_answer(v)) for x, r, v in zip(frame["image_id"], frame["rater"], frame["score"])]
    return ctx.project.answers.add_ratings(rows)
