"""Algorithm 1 of the MAD paper as a resumable state machine over a project store.

Round i (0-based, i = 0..r with r = `project.rounds`) runs these steps in order:

1. ``scan``     — score the pool with the target f_t^(i), named ``<target>_v<i>`` in the
                  project's one scan folder. Competitors are scanned once (round 0) and their
                  columns and maps reused afterwards (Algorithm 1 lines 2-4 vs line 7).
2. ``mine``     — select the candidates M(i+1) from the score table (MAD by default, Eq. 2;
                  "entropy" or "random" as baselines with MAD's budget unless `mining.n`).
3. ``ratings``  — HUMAN: ACR ratings 1-5 or out-of-domain of f_t^(i)'s prediction for every
                  image of M(i+1), by `ratings.raters` raters (one out-of-domain flag suffices).
4. ``select``   — S(i+1) = the n4 lowest-MOS images; T(i+1) ⊂ M(i+1), the unbiased test set
                  (no out-of-domain image, at most `max_per_class` per main foreground class,
                  none of S(1..i), which f_t^(i) was fine-tuned on). The last round forms no S.
5. ``masks``    — HUMAN: pixel labels of S(i+1) ∪ T(i+1).
6. ``evaluate`` — mIoU of f_t^(i) and every competitor on T0 and T(i+1) (Table 1, round i).
7. ``finetune`` — f_t^(i+1) = f_t^(i) fine-tuned on S(1..i+1) ∪ S0, LR chosen on T0
                  (`blindspots.training.replay`). Skipped in the last round.

`advance(project)` runs steps until one needs a human answer that is not there yet and returns
a `Status` saying what is awaited; with `simulate=True` simulated raters and annotators
(`blindspots.human.simulate`, reading `simulate.ground_truth`) answer instead. Each step is
recorded in the store (settings, model version, seed, result) when it starts and when it ends;
a step that raised is recorded as failed (a "step-failed" event with its message: `status`
says "failed: ..."), a step that did not end (crash, Ctrl-C) stays "running"; either is run
again on the next call, and every step is
idempotent (scan and fine-tuning resume from their own checkpoints). Every random choice takes
a seed derived from (`project.seed`, round, step), so the same seed gives the same selections.

Projects that cannot fine-tune (no S0/T0 data, or a target that is not a zoo checkpoint: ONNX,
TorchScript, a callable, precomputed outputs) run the "label" plan instead: round i is
``scan``, ``mine``, ``ratings``, ``select`` (S(i+1) and T(i+1), always formed) and ``export``
(S ∪ T with the target's prediction, to reports/round-<i>/ for pixel labelling), then the loop
stops and says why it cannot fine-tune. Round i+1 starts once the user registers the target's
next version (`register_version`, `blindspots register`).
"""
from __future__ import annotations

# The loop lives in context.py (plans, Status, resources), steps.py (the steps, Table 1),
# driver.py (advance, status) and exchange.py (imports, exports); this module is the one
# place the rest of the package and the tests import it from.
from blindspots.loop.context import (HUMAN_STEPS, LABEL_STEPS, STEPS, Status, _Loop, finetune_blocker_of, plan,
                                     step_seed, target_classes, target_column)
from blindspots.loop.driver import advance, current_position, status
from blindspots.loop.exchange import export_for_annotation, import_masks, import_ratings
from blindspots.loop.steps import (STEP_FUNCS, class_ranges, export_dir, leaderboard_frame, make_sampler,
                                   masks_needed, pool_class_ranges, ratings_progress, run_evaluate, run_export,
                                   run_finetune, run_masks, run_mine, run_ratings, run_scan, run_select,
                                   simulate_ratings, used_for_finetuning, write_leaderboard)

__all__ = ["STEPS", "LABEL_STEPS", "HUMAN_STEPS", "Status", "step_seed", "target_column", "target_classes",
           "finetune_blocker_of", "plan", "advance", "status", "current_position", "leaderboard_frame",
           "write_leaderboard", "import_ratings", "import_masks", "export_for_annotation", "masks_needed",
           "STEP_FUNCS", "class_ranges", "pool_class_ranges", "make_sampler", "ratings_progress", "export_dir",
           "run_scan", "run_mine", "run_ratings", "run_select", "run_masks", "run_evaluate", "run_finetune",
           "run_export", "simulate_ratings", "used_for_finetuning", "_Loop"]
