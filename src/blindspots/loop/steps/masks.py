"""Step ``masks`` (human): pixel labels of S(i+1) ∪ T(i+1)."""
from __future__ import annotations

from blindspots.human.simulate import SimulatedAnnotator
from blindspots.loop.context import LoopContext, Status
from blindspots.loop.maps import ground_truth
from blindspots.loop.next_action import MASK_ACTIONS
from blindspots.loop.project import Project
from blindspots.loop.steps.base import Step
from blindspots.loop.steps.region_labels import (finish_images, labelled_share, make_queries, region_images,
                                                  simulate_answers)

__all__ = ["MasksStep", "masks_needed"]


class MasksStep(Step):
    """Waits until every image of S(i+1) ∪ T(i+1) has a mask (a simulated annotator draws them with
    `simulate`)."""

    name = "masks"
    human = True

    def settings(self, ctx: LoopContext) -> dict:
        lab = ctx.cfg.labels
        if lab.kind == "regions":  # recorded only then: the settings of mask projects stay as they were
            return {"simulate": ctx.simulate, "labels": lab.kind, "regions_per_image": lab.regions_per_image,
                    "fill": lab.fill, "agree": lab.agree}
        return {"simulate": ctx.simulate}

    def run(self, ctx: LoopContext, i: int, seed: int) -> dict | Status:
        p = ctx.project
        need = masks_needed(p, i)
        have = set(p.answers.masks_for_round(i)["id"])
        by_region: list[str] = []
        waiting_regions: list[str] = []
        if ctx.cfg.labels.kind == "regions":
            by_region = region_images(ctx, i)
            make_queries(ctx, i, [x for x in by_region if x not in have])
            if ctx.simulate:
                simulate_answers(ctx, i, [x for x in by_region if x not in have])
            waiting_regions = finish_images(ctx, i, by_region, have)
            have = set(p.answers.masks_for_round(i)["id"])
        missing = [x for x in need if x not in have and x not in by_region]
        if missing and ctx.simulate:
            s = ctx.cfg.simulate
            ann = SimulatedAnnotator(boundary_px=s.boundary_px, drop_below=s.drop_below,
                                     ignore_index=ctx.classes.ignore_index, seed=seed)
            for image_id in missing:
                p.answers.add_mask(i, image_id, ann.annotate(image_id, ground_truth(ctx, image_id)),
                           source="simulated", annotator="simulated")
            missing = []
        if waiting_regions:
            missing = waiting_regions + missing
            return Status("awaiting_masks", i, "masks",
                          f"round {i}: waiting for region labels of {len(waiting_regions)} images of S({i + 1}) "
                          f"and whole masks of {len(missing) - len(waiting_regions)} images of T({i + 1}); "
                          "answer them in the web app (region page, label page).", missing, len(need) - len(missing),
                          len(need), next=MASK_ACTIONS)
        if missing:
            return Status("awaiting_masks", i, "masks",
                          f"round {i}: waiting for pixel labels of {len(missing)} of {len(need)} images "
                          f"(S({i + 1}) ∪ T({i + 1})).", missing, len(need) - len(missing), len(need),
                          next=MASK_ACTIONS)
        if by_region:  # how much of the region-labelled images people's answers (and the fill) label
            share = labelled_share([p.answers.load_mask(i, x) for x in by_region], ctx.classes.ignore_index)
            return {"n_masks": len(need), "n_region_images": len(by_region), "region_pixel_share": share}
        return {"n_masks": len(need)}


def masks_needed(project: Project, i: int) -> list[str]:
    """S(i+1) ∪ T(i+1), the images that need pixel labels in round i."""
    ids = list(project.answers.candidates(i, "S")["id"]) + list(project.answers.candidates(i, "T")["id"])
    return list(dict.fromkeys(ids))
