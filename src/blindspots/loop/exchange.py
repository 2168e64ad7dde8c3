"""Human answers in and out: CSV ratings, mask folders, CVAT and Label Studio imports and exports."""
from __future__ import annotations

from pathlib import Path

from blindspots.data.formats import import_cvat, import_labelstudio, read_masks
from blindspots.data.formats.masks import mask_filename
from blindspots.human.ratings import Ratings
from blindspots.human.scores import rating_answer
from blindspots.loop.context import LABEL_STEPS, LoopContext, Status, plan
from blindspots.loop.driver import current_position
from blindspots.loop.maps import target_map
from blindspots.loop.next_action import MASK_ACTIONS, NextAction
from blindspots.loop.project import Project
from blindspots.loop.steps import export_annotation, masks_needed


def _round_arg(project: Project, round: int | None) -> int:
    """The round to import into: `round`, or the one now in progress."""
    if round is not None:
        if project.journal.step(round, "mine") is None:
            raise ValueError(f"round: expected a round that has candidates, got {round}")
        return round
    pos = current_position(project)
    if pos is None:
        if plan(project) is LABEL_STEPS:  # S exported, waiting for the next version: that round's S ∪ T
            done = [i for i in range(project.config.project.rounds + 1)
                    if (project.journal.step(i, "select") or {}).get("status") == "done"]
            if done:
                return done[-1]
        raise ValueError("round: every round is done; pass --round to import into a past round")
    return pos[0]


def import_ratings(project: Project, path: str | Path, *, round: int | None = None) -> int:
    """Add the ratings of a CSV (`image_id,rater,score`, score 1..5 or ood) to `round` (default:
    the current one). Every image must be a candidate of M for that round; returns the count."""
    i = _round_arg(project, round)
    frame = Ratings.from_csv(path).frame
    m = set(project.answers.candidates(i, "M")["id"])
    unknown = sorted(set(frame["image_id"]) - m)
    if unknown:
        raise ValueError(f"path: expected ratings of round {i}'s candidates M({i + 1}), got {len(unknown)} other "
                         f"image ids (e.g. {unknown[:3]})")
    rows = [(i, x, r, rating_answer(v)) for x, r, v in zip(frame["image_id"], frame["rater"], frame["score"])]
    n = project.answers.add_ratings(rows)
    project.journal.log_event("ratings-import", {"path": str(path), "n": n}, round=i, step="ratings")
    return n


def import_masks(project: Project, source: str | Path, *, round: int | None = None,
                 annotator: str | None = None) -> int:
    """Add pixel labels for round `round`'s S ∪ T from a folder of index/palette PNGs (named
    like the image ids, extension .png), a CVAT "Segmentation Mask 1.1" zip, or a Label Studio
    JSON export. Masks must match their image's size; returns how many were stored."""
    i = _round_arg(project, round)
    ctx = LoopContext(project, simulate=False, progress=False)
    need = masks_needed(project, i)
    if not need:
        raise ValueError(f"round: expected round {i} to have images awaiting masks (S and T), got none yet")
    src = Path(source)
    if src.is_dir():
        present = [x for x in need if (src / mask_filename(x)).is_file()]
        if not present:  # e.g. flat file names for ids in sub-folders: say so, do not import nothing
            found = sorted(str(f.relative_to(src)) for f in src.rglob("*.png"))
            raise ValueError(f"source: expected PNG masks named like round {i}'s image ids (e.g. "
                             f"{mask_filename(need[0])!r} for {need[0]!r}), got none of the {len(need)} in "
                             f"{str(src)!r} (" + (f"it holds {len(found)} other PNGs, e.g. {found[:3]})" if found
                                                  else "it holds no PNG)"))
        masks, kind = read_masks(src, present, classes=ctx.classes), "folder"
    elif src.suffix.lower() == ".zip":
        masks, kind = import_cvat(src, ctx.classes, ids=need), "cvat"
    elif src.suffix.lower() == ".json":
        # ids: tasks created in Label Studio itself (no blindspots_id) are matched by image file name
        masks, kind = import_labelstudio(src, ctx.classes, ids=need), "labelstudio"
    else:
        raise ValueError(f"source: expected a folder of PNG masks, a CVAT .zip or a Label Studio .json, "
                         f"got {str(source)!r}")
    unknown = sorted(set(masks) - set(need))
    if unknown:
        raise ValueError(f"source: expected masks for round {i}'s S ∪ T, got {len(unknown)} other ids "
                         f"(e.g. {unknown[:3]})")
    for image_id, mask in masks.items():
        shape = ctx.pool.load(image_id).shape[:2]
        if mask.shape != shape:
            raise ValueError(f"source: expected the mask of {image_id!r} to be {shape[0]}x{shape[1]} like its "
                             f"image, got {mask.shape[0]}x{mask.shape[1]}")
        bad = mask >= ctx.classes.num_classes
        if ctx.classes.ignore_index is not None:  # the project's own ignore value, whatever it is
            bad &= mask != ctx.classes.ignore_index
        if bad.any():
            raise ValueError(f"source: expected class ids 0..{ctx.classes.num_classes - 1} or ignore in the mask "
                             f"of {image_id!r}, got {int(mask[bad][0])}")
    for image_id, mask in masks.items():
        project.answers.add_mask(i, image_id, mask, source=kind, annotator=annotator)
    project.journal.log_event("masks-import", {"source": str(source), "kind": kind, "n": len(masks)}, round=i, step="masks")
    return len(masks)


def after_masks_import(project: Project, round: int | None = None) -> Status:
    """Where round `round` (default: as `import_masks` chose) stands after a masks import: how many of
    S ∪ T still lack masks, else what comes next (label plan: scoring on T, then the target's next
    version), with the next actions as data."""
    i = _round_arg(project, round)
    need = masks_needed(project, i)
    have = set(project.answers.masks_for_round(i)["id"])
    missing = [x for x in need if x not in have]
    done = len(need) - len(missing)
    if missing:
        return Status("awaiting_masks", i, "masks", f"{len(missing)} of the {len(need)} images of round {i}'s "
                      "S ∪ T still need masks", missing, done, len(need), next=MASK_ACTIONS)
    if plan(project) is LABEL_STEPS and project.registry.model(project.config.target.name).version <= i:
        return Status("ready", i, "evaluate", f"round {i}'s S ∪ T all have masks: the next run of the loop "
                      f"scores the models on T({i + 1}); then retrain the target on S in your own stack and "
                      "register it as its next version", [], done, len(need),
                      next=(NextAction("advance", f"scores every model on T({i + 1})"),
                            NextAction("register_version", "the retrained target; then advance")))
    return Status("ready", i, "masks", f"round {i}'s S ∪ T all have masks", [], done, len(need),
                  next=(NextAction("advance", "goes on with the masks"),))


def export_for_annotation(project: Project, fmt: str, out: str | Path | None = None, *,
                          round: int | None = None, image_url: str | None = None,
                          image_root: str | Path | None = None, document_root: str | Path | None = None) -> Path:
    """Export round `round`'s S ∪ T (images without a stored mask) with the target's prediction
    as a pre-annotation: fmt "cvat" (zip with the images) or "labelstudio" (JSON tasks, and the
    labelling config beside them, `<name>_config.xml`). A round given by number whose images all
    have masks (a past round) is exported whole, with the stored masks as the pre-annotation.

    image_url / image_root / document_root: where Label Studio loads each task's image from
    (`blindspots.data.formats.labelstudio.task_image_url`); image_root defaults to the pool folder."""
    if fmt not in ("cvat", "labelstudio"):
        raise ValueError(f"format: expected 'cvat' or 'labelstudio', got {fmt!r}")
    i = _round_arg(project, round)
    ctx = LoopContext(project, simulate=False, progress=False)
    have = set(project.answers.masks_for_round(i)["id"])
    need = masks_needed(project, i)
    if not need:  # S and T are chosen after the ratings: nothing to label yet
        raise ValueError(f"round: expected images awaiting masks in round {i}, got none: its S ∪ T are not "
                         f"chosen yet (they come after the ratings; the project's status "
                         "says what the round waits for)")
    ids = [x for x in need if x not in have]
    if not ids and round is not None:  # a past round asked for by number: all of its S ∪ T again
        ids = need
    if not ids:
        raise ValueError(f"round: expected images awaiting masks in round {i}, got none (every image of its "
                         f"S ∪ T has a mask; `--round {i}` exports them again, with the stored masks)")
    # the pre-annotation: the stored mask where people drew one (a re-export), else the target's prediction
    preds = {x: project.answers.load_mask(i, x) if x in have else target_map(ctx, i, x) for x in ids}
    default = project.reports_dir / f"round-{i}-{'cvat.zip' if fmt == 'cvat' else 'labelstudio.json'}"
    where = {"image_url": image_url, "image_root": image_root, "document_root": document_root}
    if fmt == "labelstudio" and image_url is None and image_root is None:
        where["image_root"] = ctx.cfg.location(ctx.cfg.pool.root)  # a folder Label Studio can serve
    return export_annotation(ctx, i, fmt, Path(out) if out is not None else default, ids, preds, **where)
