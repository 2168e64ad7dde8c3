"""`pull`: finished Label Studio annotations into the project's masks (or ratings), so `round` goes on.

Everything is read and checked first (every page of tasks, every mask decoded and sized, every label a
class, polygons only on a region task, every image one the round awaits); only then is anything stored, so a bad annotation or a server
that stops answering half-way leaves the project as it was. Per task the latest submitted annotation
wins (an edited annotation replaces the mask stored from its older version); a task whose stored
annotation is unchanged is not written again (re-pulling is idempotent). Tasks skipped (cancelled) in
Label Studio and pushed tasks deleted there are reported, never dropped in silence.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blindspots.data.formats.labelstudio import annotation_mask, image_path_of
from blindspots.data.formats.labelstudio_config import RATING_CHOICES
from blindspots.integrations.labelstudio.connection import KINDS, load_connection, save_connection

# Lazy imports: pandas, pyarrow.parquet, the region questions (`integrations.labelstudio.regions`, `loop.regions`:
# they import the samplers) (the Label Studio commands start without them).

log = logging.getLogger(__name__)
MAX_LISTED = 10  # bad annotations named in the error (all are counted)


@dataclass
class PullReport:
    kind: str
    ls_project: int
    stored: list[str] = field(default_factory=list)      # masks / ratings stored (new or edited)
    unchanged: int = 0
    waiting: list[str] = field(default_factory=list)     # tasks without a submitted annotation yet
    skipped: list[str] = field(default_factory=list)     # tasks skipped (cancelled) or submitted empty
    deleted: list[str] = field(default_factory=list)     # pushed tasks deleted in Label Studio
    ignored: list[str] = field(default_factory=list)     # annotated tasks of images the round does not await
    after: Any = None  # masks: the round's `loop.Status` after the pull (next actions as data); ratings: None

    def lines(self) -> list[str]:
        out = [f"pulled {len(self.stored)} {self.kind} answer(s) from Label Studio project {self.ls_project} "
               f"({self.unchanged} unchanged, {len(self.waiting)} task(s) not annotated yet)"]
        if self.skipped:
            out.append(f"skipped or empty in Label Studio ({len(self.skipped)}): {', '.join(self.skipped[:10])}")
        if self.deleted:
            out.append(f"deleted in Label Studio ({len(self.deleted)}; pushing the round again restores "
                       f"them): {', '.join(self.deleted[:10])}")
        if self.ignored:
            out.append(f"annotations on images the round does not await, ignored ({len(self.ignored)}): "
                       f"{', '.join(self.ignored[:10])}")
        if self.after is not None:
            out.append(self.after.message)
        return out


def _when(ann: dict) -> tuple[str, int]:
    return (str(ann.get("updated_at") or ann.get("created_at") or ""), int(ann.get("id") or 0))


def _author(ann: dict, users: dict[int, str]) -> str:
    who = ann.get("completed_by")
    if isinstance(who, dict):
        return str(who.get("email") or who.get("id"))
    return users.get(int(who), f"labelstudio-user-{who}") if who is not None else "labelstudio"


def _image_of(task: dict, conn_rec: dict | None, awaited: dict[int, list[str]]) -> tuple[int | None, str | None]:
    """(round, image id) of a task: our ledger, else the task's blindspots_id and round, else (tasks made
    in Label Studio itself) an awaited id whose path the image URL ends with."""
    if conn_rec is not None:
        return int(conn_rec["round"]), str(conn_rec["id"])
    data = task.get("data") or {}
    if data.get("blindspots_id") is not None and data.get("round") is not None:
        return int(data["round"]), str(data["blindspots_id"])
    path = image_path_of(str(data.get("image") or ""))
    for i, ids in awaited.items():
        hits = [x for x in ids if path == x or path.endswith("/" + x)]
        if len(hits) == 1:
            return i, hits[0]
    return None, None


def pull(project: Any, *, kind: str = "masks", ignore_other: bool = False, page_size: int = 100) -> PullReport:
    """Read the `kind` ("masks" or "ratings") project's annotations into `project`; see the module docstring.

    ignore_other: annotations on images that no round awaits are reported instead of being an error.
    """
    from blindspots.integrations.labelstudio.regions import pull_region_annotation
    from blindspots.loop import LoopContext, masks_needed
    from blindspots.loop.regions import query_images

    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {list(KINDS)}, got {kind!r}")
    conn = load_connection(project.path)
    client = conn.client()
    pid = conn.ls_project(kind)
    # 1. read everything (a server lost here leaves the project untouched)
    tasks = list(client.tasks(pid, page_size=page_size))
    users = client.users()
    loop = LoopContext(project, simulate=False, progress=False)
    rounds = range(project.config.project.rounds + 1)
    awaited = {i: (masks_needed(project, i) if kind == "masks" else [str(x) for x in project.answers.candidates(i, "M")["id"]])
               for i in rounds}
    awaited = {i: ids for i, ids in awaited.items() if ids}
    by_region = {i: set(query_images(project, i)) if kind == "masks" else set() for i in awaited}
    results: dict[str, list] = {}  # ledger key -> the annotation's results (region answers read them)
    pushed = conn.pushed(kind)
    report = PullReport(kind, pid)
    other: list[str] = []
    bad: list[str] = []  # every annotation that cannot be stored, reported together
    writes: list[tuple[int, str, Any, str, str, str]] = []  # round, id, mask or score, author, ledger key, signature
    for task in tasks:
        tid = int(task["id"])
        i, image_id = _image_of(task, pushed.get(tid), awaited)
        label = f"task {tid}" + (f" ({image_id})" if image_id else "")
        anns = [a for a in task.get("annotations") or []]
        done = [a for a in anns if not (a.get("was_cancelled") or a.get("skipped"))]
        if i is None or image_id not in awaited.get(i, []):
            if done:
                other.append(f"task {tid} ({(task.get('data') or {}).get('image')})")
            continue
        if not done:
            (report.skipped if anns else report.waiting).append(label + (" skipped" if anns else ""))
            continue
        if kind == "masks":
            ann = max(done, key=_when)
            sig = f"{ann.get('id')}@{_when(ann)[0]}"
            key = f"{pid}:{tid}"
            if conn.pulled.get(key) == sig and project.answers.stored_mask_path(i, image_id) is not None:
                report.unchanged += 1
                continue
            try:
                mask = _mask(loop, ann, label, i, image_id)
            except ValueError as e:
                bad.append(str(e))
                continue
            if image_id in by_region[i] and any(str(r.get("type", "")).lower() == "brushlabels"
                                                 for r in ann.get("result") or []):
                # a region task's answers are its polygons' labels: brush strokes would be dropped in silence
                bad.append(f"{label}, annotation {ann.get('id')}: expected polygon labels only on a region task "
                           "(labels.kind = \"regions\"), got brush strokes (remove them; relabel or delete the "
                           "polygons instead)")
                continue
            if mask is None and image_id not in by_region[i]:  # no polygon left of a region task: all mixed
                report.skipped.append(label + " submitted empty")
                continue
            writes.append((i, image_id, mask, _author(ann, users), key, sig))
            results[key] = list(ann.get("result") or [])
        else:
            for ann in done:
                key, sig = f"{pid}:{tid}:{ann.get('id')}", _when(ann)[0]
                if conn.pulled.get(key) == sig:
                    report.unchanged += 1
                    continue
                try:
                    score = _rating(ann, label)
                except ValueError as e:
                    bad.append(str(e))
                    continue
                if score is None:
                    report.skipped.append(label + " without a rating")
                    continue
                writes.append((i, image_id, score, _author(ann, users), key, sig))
    if bad:
        more = f"; and {len(bad) - MAX_LISTED} more" if len(bad) > MAX_LISTED else ""
        raise ValueError(f"labelstudio: expected annotations blindspots can store, got {len(bad)} that it cannot in "
                         f"Label Studio project {pid}: {'; '.join(bad[:MAX_LISTED])}{more}; nothing was stored "
                         "(correct them in Label Studio and pull again)")
    if other and not ignore_other:
        raise ValueError(f"labelstudio: expected annotations on images a round awaits ({kind}: "
                         f"{'S ∪ T' if kind == 'masks' else 'M'}), got {len(other)} annotated task(s) on other images "
                         f"in Label Studio project {pid}: {', '.join(other[:5])}; nothing was stored (delete those "
                         "tasks there, or pass --ignore-other)")
    report.ignored = other
    live = {int(t["id"]) for t in tasks}
    report.deleted = [f"task {tid} ({rec['id']}, round {rec['round']})" for tid, rec in sorted(pushed.items())
                      if tid not in live]
    # 2. store (every answer checked above)
    if kind == "masks":
        for i, image_id, mask, who, key, sig in writes:
            if image_id in by_region[i]:  # the answers of its regions, exact to the regions' pixels
                pull_region_annotation(project, i, image_id, results[key], who, class_names=list(loop.classes.names),
                                       ignore_index=loop.classes.ignore_index)
            else:
                project.answers.add_mask(i, image_id, mask, source="labelstudio", annotator=who)
    elif writes:
        project.answers.add_ratings([(i, x, who, score) for i, x, score, who, _, _ in writes])
    for i, image_id, _, _, key, sig in writes:
        conn.pulled[key] = sig
        report.stored.append(image_id)
    save_connection(project.path, conn)
    project.journal.log_event("labelstudio-pull", {"kind": kind, "ls_project": pid, "stored": len(writes),
                                           "skipped": len(report.skipped), "deleted": len(report.deleted)},
                      step=kind)
    report.after = _after(project, kind, sorted({w[0] for w in writes}))
    return report


def _mask(loop: Any, ann: dict, label: str, i: int, image_id: str) -> np.ndarray | None:
    classes = loop.classes
    try:
        mask = annotation_mask(ann.get("result") or [], classes, where=label)
    except ValueError as e:
        raise ValueError(f"{label}, annotation {ann.get('id')}: {e}") from None
    if mask is None:  # submitted without a region: reported, not stored as an all-ignore mask
        return None
    shape = loop.pool.load(image_id).shape[:2]
    if mask.shape != shape:
        raise ValueError(f"{label}: expected a {shape[0]}x{shape[1]} mask like the image, got "
                         f"{mask.shape[0]}x{mask.shape[1]}")
    return mask


def _rating(ann: dict, label: str) -> int | str | None:
    for r in ann.get("result") or []:
        if str(r.get("type", "")).lower() == "choices":
            values = (r.get("value") or {}).get("choices") or []
            if len(values) != 1 or values[0] not in RATING_CHOICES:
                raise ValueError(f"{label}, annotation {ann.get('id')}: expected one of "
                                 f"{list(RATING_CHOICES)}, got {values}")
            return "ood" if values[0] == RATING_CHOICES[-1] else int(values[0])
    return None


def _after(project: Any, kind: str, rounds: list[int]) -> Any:
    """The round's `Status` after a masks pull (None after ratings: `loop.status` says how many are in)."""
    from blindspots.loop import after_masks_import

    if kind != "masks":
        return None
    try:
        return after_masks_import(project, rounds[-1] if rounds else None)
    except ValueError:  # no round awaits masks
        return None
