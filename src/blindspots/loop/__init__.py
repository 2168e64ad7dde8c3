"""The troubleshooting loop: Algorithm 1 of the MAD paper ("Efficiently Troubleshooting Image
Segmentation Models with Human-in-the-Loop") as a resumable state machine over a project folder
(docs/loop.md).

Round i (0-based, i = 0..r with r = `project.rounds`) runs the steps of its plan in order, each a
`Step` of `STEP_REGISTRY` (`blindspots.loop.steps`):

1. ``scan``     — score the pool with the target f_t^(i), named ``<target>_v<i>`` in the
                  project's one scan folder; competitors are scanned once and reused.
2. ``mine``     — the candidates M(i+1) (MAD by default, Eq. 2; other samplers as baselines).
3. ``ratings``  — HUMAN: ACR ratings 1-5 or out-of-domain of every image of M(i+1).
4. ``select``   — S(i+1), the n4 lowest-MOS images, and T(i+1) ⊂ M(i+1), the unbiased test set.
5. ``masks``    — HUMAN: pixel labels of S(i+1) ∪ T(i+1).
6. ``evaluate`` — mIoU of f_t^(i) and every competitor on T0 and T(i+1) (Table 1, round i).
7. ``finetune`` — f_t^(i+1) = f_t^(i) fine-tuned on S(1..i+1) ∪ S0, LR chosen on T0.

`advance(project)` runs steps until one needs a human answer that is not there yet and returns a
`Status` saying what is awaited; with `simulate=True` simulated raters and annotators answer.
Each step is recorded in the store when it starts and when it ends (or fails) and is run again
after a crash; every random choice takes a seed derived from (`project.seed`, round, step).

Projects that cannot fine-tune (no S0/T0, or a target that is not a trainable torch model) run
the label plan (`LABEL_STEPS`): ``scan``, ``mine``, ``ratings``, ``select`` and ``export`` (S ∪ T
with the target's prediction for labelling elsewhere); round i+1 starts once the user registers
the target's next version (`register_version`).

Typical use::

    from blindspots.loop import Project, advance, leaderboard_frame
    project = Project.open("runs/demo/project")
    print(advance(project, simulate=True))
    print(leaderboard_frame(project))
"""
from __future__ import annotations

from blindspots.loop.context import (LABEL_STEPS, STEPS, LoopContext, Status, plan, project_classes, step_seed,
                                     target_classes, target_column)
from blindspots.loop.driver import advance, status
from blindspots.loop.exchange import after_masks_import, export_for_annotation, import_masks, import_ratings
from blindspots.loop.leaderboard import format_leaderboard, leaderboard_frame, write_leaderboard
from blindspots.loop.lock import ProjectBusy
from blindspots.loop.next_action import NextAction, phrase_commands
from blindspots.loop.progress import (activity_since_last_round, last_event_id, rating_progress, set_n4, set_raters,
                                      steps_done_since, steps_ran)
from blindspots.loop.answers import Answers
from blindspots.loop.project import Project, ProjectError
from blindspots.loop.queries import Journal, ModelRecord, Registry
from blindspots.loop.regions import set_labels
from blindspots.loop.setup import check_config, create_project, register_version
from blindspots.loop.steps import STEP_REGISTRY, Step, masks_needed
from blindspots.loop.steps.export import labelstudio_config_path

__all__ = [
    # the project folder and running it
    "Project", "ProjectError", "ProjectBusy", "Answers", "Journal", "Registry", "ModelRecord", "advance", "status", "Status", "NextAction", "phrase_commands",
    # people's answers in and out
    "import_ratings", "import_masks", "after_masks_import", "export_for_annotation", "masks_needed",
    "labelstudio_config_path", "rating_progress", "set_raters", "set_n4", "set_labels",
    # what happened since the last run
    "activity_since_last_round", "last_event_id", "steps_done_since", "steps_ran",
    # Table 1
    "format_leaderboard", "leaderboard_frame", "write_leaderboard",
    # creating a project, new target versions
    "check_config", "create_project", "register_version",
    # the steps and their context
    "STEPS", "LABEL_STEPS", "STEP_REGISTRY", "Step", "LoopContext", "plan", "step_seed", "target_column",
    "project_classes",
    "target_classes",
]
