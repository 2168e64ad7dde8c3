"""Step ``evaluate``: Table 1, round i — every model's mIoU on T0 (when the project has one) and
on T(i+1).
"""
from __future__ import annotations

import logging

from blindspots.loop.context import LoopContext
from blindspots.loop.leaderboard import write_leaderboard
from blindspots.loop.maps import map_miou, round_pairs
from blindspots.loop.project import Project
from blindspots.loop.steps.base import Step
from blindspots.models.protocol import reads_ids

# Lazy imports: the torch evaluation loop (`training.replay`) only when a model runs.

__all__ = ["EvaluateStep", "t_masks_complete"]

log = logging.getLogger(__name__)


class EvaluateStep(Step):
    """The paper's plan: a forward of every model on T(i+1). The label plan: the round's scan maps
    (any kind, precomputed outputs too), once people have drawn T(i+1)'s masks."""

    name = "evaluate"

    def run(self, ctx: LoopContext, i: int, seed: int) -> dict:
        from blindspots.training.replay import evaluate_segmenter

        p, c = ctx.project, ctx.cfg
        t0 = ctx.labelled_set("val") if c.data.val else None  # the label plan may have no T0
        ti = round_pairs(ctx, i, "T")
        k, ign = ctx.classes.num_classes, ctx.classes.ignore_index
        out = {}
        models = [(c.target.name, i)] + [(g.name, 0) for g in c.competitors]
        for name, version in models:
            seg = ctx.segmenter(name, version) if t0 is not None or ctx.blocker is None else None
            by_id = reads_ids(seg)  # precomputed outputs: pool ids only, no pixels
            if by_id and t0 is not None and p.registry.metric(name, version, "T0") is None:
                log.warning("round %d: %r gives precomputed outputs of pool images, so it has no T0 mIoU", i, name)
            elif t0 is not None and p.registry.metric(name, version, "T0") is None:
                p.registry.set_metric(name, version, "T0", evaluate_segmenter(seg, t0, k, ignore_index=ign), len(t0))
            if ctx.blocker is None and not by_id:  # the paper's plan: a forward on T(i+1), as Table 1 always was
                miou = evaluate_segmenter(seg, ti, k, ignore_index=ign)
            else:  # label plan: the round's scan maps (no forward)
                miou = map_miou(ctx, i, "T", name, version)
            p.registry.set_metric(name, version, f"T{i + 1}", miou, len(ti), {"round": i})
            out[name] = {"T0": p.registry.metric(name, version, "T0"), f"T{i + 1}": miou}
        write_leaderboard(p)
        return out


def t_masks_complete(project: Project, i: int) -> bool:
    """Label plan: True once round i's S(i+1) ∪ T(i+1) is exported and every image of a non-empty
    T(i+1) has a mask, so `EvaluateStep` can score the models on it."""
    if (project.journal.step(i, "export") or {}).get("status") != "done":
        return False
    t = list(project.answers.candidates(i, "T")["id"])
    have = set(project.answers.masks_for_round(i)["id"])
    return bool(t) and all(x in have for x in t)
