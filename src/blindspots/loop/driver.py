"""The driver of Algorithm 1: `advance` runs steps until people are needed, `status` says where
the loop stands; both follow the project's plan (`context.plan`)."""
from __future__ import annotations

import logging

from blindspots.loop.context import LABEL_STEPS, STEPS, LoopContext, Status, finetune_blocker_of, plan, step_seed
from blindspots.loop.lock import advance_lock
from blindspots.loop.next_action import MASK_ACTIONS, RATE_ACTIONS, NextAction
from blindspots.loop.progress import masks_line, rating_progress
from blindspots.loop.project import Project, ProjectError
from blindspots.loop.regions import answer_count
from blindspots.loop.steps import STEP_REGISTRY, export_dir, masks_needed, ratings_progress, t_masks_complete

log = logging.getLogger(__name__)


def current_position(project: Project) -> tuple[int, str] | None:
    """(round, step) of the first step not done yet, or None when every round is done (label
    plan: or when the next round waits for the target's next version to be registered)."""
    last = project.config.project.rounds
    steps = plan(project)
    for i in range(last + 1):
        if steps is LABEL_STEPS and i > project.target_version():
            return None
        for step in steps:
            st = project.journal.step(i, step)
            if st is None or st["status"] != "done":
                return i, step
    return None


def _stopped(project: Project) -> Status:
    """The Status once `current_position` is None: every round done, or (label plan) S exported."""
    blocker = finetune_blocker_of(project)
    last = project.config.project.rounds
    if blocker is None:
        return Status("finished", last, "done", f"all {last} rounds are done",
                      next=(NextAction("leaderboard", "Table 1"),))
    done = [i for i in range(last + 1) if (project.journal.step(i, "export") or {}).get("status") == "done"]
    i = done[-1] if done else 0
    r = (project.journal.step(i, "export") or {}).get("result") or {}

    need = masks_needed(project, i)
    n_s, n_t = r.get("n_S", 0), r.get("n_T", 0)
    both = f", {n_s + n_t - len(need)} in both" if n_s + n_t > len(need) else ""
    head = (f"round {i}: S({i + 1}) ∪ T({i + 1}), {len(need)} images ({n_s} in S({i + 1}), {n_t} in T({i + 1}){both}), "
            f"exported for pixel labelling to {r.get('folder', export_dir(project, i))} (images, predictions, "
            f"cvat.zip, labelstudio.json and its labelling config); {masks_line(project, i, need)}")
    retrained = NextAction("register_version", f"the target retrained on S({i + 1}) in your own stack; then advance")
    if (project.journal.step(i, "evaluate") or {}).get("status") == "done":
        return Status("exported", i, "done", f"{head}; every model was scored on T({i + 1}). Next: retrain the "
                      f"target on S({i + 1}) in your own stack and register it ({blocker})",
                      next=(retrained, NextAction("leaderboard", f"Table 1 with T({i + 1})")))
    return Status("exported", i, "done", f"{head}; the loop stops here: {blocker}",
                  next=(NextAction("import_masks", f"masks of T({i + 1}) score every model on it"), retrained))


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if not isinstance(e, ValueError) or not text else text


def advance(project: Project, *, simulate: bool = False, progress: bool = True,
            max_steps: int | None = None) -> Status:
    """Run Algorithm 1 until a human answer is needed (or the last round is done).

    simulate: simulated raters / annotators answer (needs `simulate.ground_truth`).
    max_steps: stop after this many steps (None: no limit) — for tests and stepping by hand.
    Returns a Status; re-running after a crash continues with the unfinished step. One run at a time:
    a second `advance` on the same project waits briefly, then raises `ProjectBusy` (`loop.lock`).
    """
    with advance_lock(project.path):
        return _advance(project, simulate=simulate, progress=progress, max_steps=max_steps)


def _advance(project: Project, *, simulate: bool, progress: bool, max_steps: int | None) -> Status:
    ctx = LoopContext(project, simulate=simulate, progress=progress)
    seed = project.config.project.seed
    if plan(project) is LABEL_STEPS:
        _evaluate_labelled_rounds(ctx, seed)
    ran = 0
    while True:
        pos = current_position(project)
        if pos is None:
            return _stopped(project)
        i, step = pos
        if max_steps is not None and ran >= max_steps:
            return Status("paused", i, step, f"round {i}: paused before step {step!r}")
        if project.journal.step(i, step) is None and step == STEPS[0]:  # both plans start with "scan"
            project.journal.start_round(i, model_version=i)
        if project.target_version() < i:
            raise ProjectError(f"models.{project.config.target.name}: expected version {i} before round {i}, "
                               f"got version {project.target_version()} (the store is inconsistent)")
        result = _run_step(ctx, i, step, seed)
        if isinstance(result, Status):
            project.journal.log_event("awaiting", {"state": result.state, "missing": len(result.awaited)}, round=i, step=step)
            return result
        project.journal.end_step(i, step, result)
        if step == plan(project)[-1]:
            project.journal.finish_round(i)
        ran += 1


def _run_step(ctx: LoopContext, i: int, step: str, seed: int) -> dict | Status:
    """Run one step of round i, recorded (begin, end or failed) in the store."""
    project = ctx.project
    s = step_seed(seed, i, step)
    runner = STEP_REGISTRY[step]
    project.journal.begin_step(i, step, runner.settings(ctx), model_version=i, seed=s)
    log.info("round %d: %s", i, step)
    try:
        return runner.run(ctx, i, s)
    except Exception as e:
        # Recorded, so `status` says "failed: <message>" (not running); the next `advance` runs it
        # again. Ctrl-C leaves it "running", as a crash does; it is run again too.
        try:
            project.journal.fail_step(i, step, _one_line(e))
        except Exception:  # noqa: BLE001 - a broken store must not hide the step's own error
            log.warning("round %d: could not record that step %r failed", i, step, exc_info=True)
        raise


def _evaluate_labelled_rounds(ctx: LoopContext, seed: int) -> None:
    """Label plan: once people have drawn the masks of an exported round's T(i+1), score every model
    of that round on it (the round's "evaluate" step, outside the plan: it never waits), so that
    `blindspots leaderboard` has Table 1's T(i+1) columns (T0 too when the project has one)."""
    project = ctx.project
    for i in range(project.config.project.rounds + 1):
        if (project.journal.step(i, "evaluate") or {}).get("status") == "done" or not t_masks_complete(project, i):
            continue
        try:
            result = _run_step(ctx, i, "evaluate", seed)
        except Exception as e:  # noqa: BLE001 - Table 1 is a side product: it must not stop the loop
            log.warning("round %d: could not score the models on T(%d) (%s); the next `round` tries again",
                        i, i + 1, _one_line(e))
            continue
        project.journal.end_step(i, "evaluate", result)  # type: ignore[arg-type]  # evaluate never waits


def status(project: Project) -> Status:
    """Where the loop stands, without running anything (human steps report their progress)."""
    pos = current_position(project)
    if pos is None:
        st = _stopped(project)
        return Status("finished", st.round, "done", "all rounds are done") if st.state == "finished" else st
    i, step = pos
    ctx = LoopContext(project, simulate=False, progress=False)
    st = project.journal.step(i, step)
    err = project.journal.step_failure(i, step) if st is not None and st["status"] != "done" else None
    if err is not None:
        return Status("failed", i, step, f"round {i}: step {step!r} failed: {err}; fix the cause and retry",
                      next=(NextAction("advance", "retries the step"),))
    if step == "ratings" and st is not None:
        missing, have, total = ratings_progress(ctx, i)
        prog = rating_progress(project, i)
        if not prog.missing:  # every answer is in; the loop goes on at the next `round`
            return Status("ready", i, step, f"round {i}: ratings complete ({prog.counts()})", missing, have,
                          total, next=(NextAction("advance", f"selects S({i + 1}) and T({i + 1})"),))
        return Status("awaiting_ratings", i, step, f"round {i}: waiting for ratings: {prog.counts()}"
                      + (f"; {prog.advice()}" if prog.unreachable else ""), missing, have, total, next=RATE_ACTIONS)
    if step == "masks" and st is not None:
        need = masks_needed(project, i)
        have = set(project.answers.masks_for_round(i)["id"])
        missing = [x for x in need if x not in have]
        answered, asked = answer_count(project, i)  # labels.kind = "regions": the questions of S
        regions = f"; region answers {answered}/{asked} in (the app's /regions page)" if asked else ""
        return Status("awaiting_masks", i, step, f"round {i}: waiting for masks ({len(need) - len(missing)}/"
                      f"{len(need)} in){regions}", missing, len(need) - len(missing), len(need), next=MASK_ACTIONS)
    return Status("ready", i, step, f"round {i}: next step is {step!r}",
                  next=(NextAction("advance", f"runs {step!r} and what follows until people are needed"),))
