"""The steps of a round, one object each in one registry (as `blindspots.mine.samplers.registry` holds the
samplers): name -> `Step`. The driver runs `STEP_REGISTRY[name].run(ctx, i, seed)` for each
name of the project's plan (`STEPS` or `LABEL_STEPS`); add a step here and a plan that names it
runs it."""
from __future__ import annotations

from blindspots.loop.steps.base import Step
from blindspots.loop.steps.evaluate import EvaluateStep, t_masks_complete
from blindspots.loop.steps.export import ExportStep, export_annotation, export_dir
from blindspots.loop.steps.finetune import FinetuneStep
from blindspots.loop.steps.masks import MasksStep, masks_needed
from blindspots.loop.steps.mine import MineStep, class_ranges, make_sampler
from blindspots.loop.steps.ratings import RatingsStep, ratings_progress, simulate_ratings
from blindspots.loop.steps.scan import ScanStep
from blindspots.loop.steps.select import SelectStep, used_for_finetuning

__all__ = ["Step", "STEP_REGISTRY", "HUMAN_STEPS", "get_step", "masks_needed", "ratings_progress",
           "simulate_ratings", "class_ranges", "make_sampler", "used_for_finetuning",
           "t_masks_complete", "export_dir", "export_annotation"]

STEP_REGISTRY: dict[str, Step] = {s.name: s for s in (
    ScanStep(), MineStep(), RatingsStep(), SelectStep(), MasksStep(), EvaluateStep(), FinetuneStep(), ExportStep(),
)}

#: the steps that wait for people's answers
HUMAN_STEPS = tuple(name for name, s in STEP_REGISTRY.items() if s.human)


def get_step(name: str) -> Step:
    """The registered step `name`; ValueError listing the registered names otherwise."""
    if not isinstance(name, str) or name not in STEP_REGISTRY:
        raise ValueError(f"step: expected one of {list(STEP_REGISTRY)}, got {name!r}")
    return STEP_REGISTRY[name]
