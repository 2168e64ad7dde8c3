"""Step ``masks`` (human): pixel labels of S(i+1) ∪ T(i+1)."""
from __future__ import annotations

from blindspots.human.simulate import SimulatedAnnotator
from blindspots.loop.context import LoopContext, Status
from blindspots.loop.maps import ground_truth
from blindspots.loop.next_action import MASK_ACTIONS
from blindspots.loop.project import Project
from blindspots.loop.steps.base import Step

__all__ = ["MasksStep", "masks_needed"]


class MasksStep(Step):
    """Waits until every image of S(i+1) ∪ T(i+1) has a mask (a simulated annotator draws them with
    `simulate`)."""

    name = "masks"
    human = True

    def settings(self, ctx: LoopContext) -> dict:
        return {"simulate": ctx.simulate}

    def run(self, ctx: LoopContext, i: int, seed: int) -> dict | Status:
        p = ctx.project
        need = masks_needed(p, i)
        have = set(p.masks_for_round(i)["id"])
        missing = [x for x in need if x not in have]
        if missing and ctx.simulate:
            s = ctx.cfg.simulate
            ann = SimulatedAnnotator(boundary_px=s.boundary_px, drop_below=s.drop_below,
                                     ignore_index=ctx.classes.ignore_index, seed=seed)
            for image_id in missing:
                p.add_mask(i, image_id, ann.annotate(image_id, ground_truth(ctx, image_id)),
                           source="simulated", annotator="simulated")
            missing = []
        if missing:
            return Status("awaiting_masks", i, "masks",
                          f"round {i}: waiting for pixel labels of {len(missing)} of {len(need)} images "
                          f"(S({i + 1}) ∪ T({i + 1})).", missing, len(need) - len(missing), len(need),
                          next=MASK_ACTIONS)
        return {"n_masks": len(need)}


def masks_needed(project: Project, i: int) -> list[str]:
    """S(i+1) ∪ T(i+1), the images that need pixel labels in round i."""
    ids = list(project.candidates(i, "S")["id"]) + list(project.candidates(i, "T")["id"])
    return list(dict.fromkeys(ids))
