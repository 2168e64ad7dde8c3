"""`push`: a round's images as Label Studio tasks with the target's prediction pre-annotated.

masks: S(i+1) ∪ T(i+1) without a stored mask, into the masks project (an image of S asked about by regions,
`labels.kind = "regions"`: a polygon per region, `integrations.labelstudio.regions`; a masks project without
PolygonLabels for every class is refused for them); ratings: the candidates M(i+1)
into the ratings project. Each task's data holds the image URL, `blindspots_id`, `round`, `set`
(S, T or M) and the mining pick's rank / score / reason (`mad_*`), S's MOS (`mos_*`), so the Data
Manager can sort by them. Pushing again adds only what is not there yet; a pushed task deleted in
Label Studio is pushed again (and said so).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from blindspots.data.formats.labelstudio import task_image_url
from blindspots.data.formats.labelstudio_config import read_config
from blindspots.integrations.labelstudio.connect import check_config, config_summary
from blindspots.integrations.labelstudio.connection import KINDS, Connection, load_connection, save_connection
from blindspots.integrations.labelstudio.tasks import brush_prediction, candidate_fields

# Lazy imports: pandas, pyarrow.parquet, the region questions (`integrations.labelstudio.regions`, `loop.regions`:
# they import the samplers) (the Label Studio commands start without them).

log = logging.getLogger(__name__)
_BATCH = 25


@dataclass
class PushReport:
    kind: str
    round: int
    ls_project: int
    created: list[str] = field(default_factory=list)     # image ids with a new task
    recreated: list[str] = field(default_factory=list)   # ... whose earlier task was deleted in Label Studio
    already: int = 0                                     # tasks there before

    def __str__(self) -> str:
        text = (f"round {self.round}: pushed {len(self.created)} {self.kind} task(s) to Label Studio project "
                f"{self.ls_project} ({self.already} there already)")
        if self.recreated:
            text += f"; {len(self.recreated)} deleted in Label Studio were pushed again: {self.recreated[:5]}"
        return text


def _round(project: Any, round: int | None) -> int:
    """`round` (checked), else the latest round with candidates."""
    if round is not None:
        if project.journal.step(round, "mine") is None:
            raise ValueError(f"round: expected a round that has candidates, got {round}")
        return int(round)
    i = project.answers.last_mined_round()
    if i is None:
        raise ValueError(f"round: expected a round with candidates, got none yet (advance the project "
                         f"{str(project.path)!r} first)")
    return i


def _ids_to_push(project: Any, i: int, kind: str) -> list[str]:
    from blindspots.loop import masks_needed

    if kind == "ratings":
        return [str(x) for x in project.answers.candidates(i, "M")["id"]]
    have = set(project.answers.masks_for_round(i)["id"])
    return [x for x in masks_needed(project, i) if x not in have]


def task_set(in_s: bool, in_t: bool) -> str:
    """A task's `set` field: "S", "T", "S+T" (an image that is both a counterexample and a test image; it was
    marked "S" only, so Label Studio showed fewer T tasks than T has), or "M" (a rating task)."""
    return "S+T" if in_s and in_t else "S" if in_s else "T" if in_t else "M"


def _data(project: Any, i: int, image_id: str, url: str, names: list[str]) -> dict[str, Any]:
    rows = {k: project.answers.candidates(i, k).set_index("id") for k in "MST"}
    data: dict[str, Any] = {"image": url, "blindspots_id": image_id, "round": i,
                            "set": task_set(image_id in rows["S"].index, image_id in rows["T"].index)}
    which = data["set"]
    if which != "M":  # an image can be in both S and T: each flag filters the Data Manager on its own
        data.update({"in_S": image_id in rows["S"].index, "in_T": image_id in rows["T"].index})

    def row(k: str) -> dict | None:
        f = rows[k]
        return None if image_id not in f.index else {"rank": f.loc[image_id, "rank"], "score": f.loc[image_id, "score"],
                                                     "reason": f.loc[image_id, "reason"]}

    data.update(candidate_fields(row("M"), "mad", names))
    if data.get("in_S"):
        data.update({k.replace("s_", "mos_", 1): v for k, v in candidate_fields(row("S"), "s", names).items()
                     if not k.startswith("s_reason")})
    return data


def push(project: Any, *, round: int | None = None, kind: str = "masks", progress: bool = True) -> PushReport:
    """Push round `round`'s (default: the current one) images of `kind` ("masks" or "ratings")."""
    from blindspots.integrations.labelstudio.regions import region_task
    from blindspots.loop import LoopContext, target_column
    from blindspots.loop.maps import target_map
    from blindspots.loop.regions import query_images

    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {list(KINDS)}, got {kind!r}")
    conn = load_connection(project.path)
    client = conn.client()
    pid = conn.ls_project(kind)
    i = _round(project, round)
    loop = LoopContext(project, simulate=False, progress=False)
    classes = loop.classes
    config = str(client.project(pid).get("label_config") or "")
    check_config(config, classes, kind, pid)  # changed in Label Studio since `connect`
    tags = read_config(config)
    brush = next(iter(tags.brush), None)
    polygon = next(iter(tags.polygon), None)
    ids = _ids_to_push(project, i, kind)
    if not ids:
        raise ValueError(f"round: expected images awaiting {kind} in round {i}, got none")
    by_region = set(query_images(project, i)) & set(ids) if kind == "masks" else set()
    if by_region and (not tags.image or polygon is None or set(classes.names) - set(tags.polygon[polygon])):
        # as brush tasks, their whole-mask answers would be read as every region "mixed / unsure"
        raise ValueError(f"labels: expected PolygonLabels with every class in Label Studio project {pid}'s labelling "
                         f"config for the region questions of {len(by_region)} image(s) of S (labels.kind = "
                         f"\"regions\"), got a config with {config_summary(tags)}; connect again with "
                         "update_config=True (the command's --update-config) to write the generated config")
    live = {int(t["id"]) for t in client.tasks(pid)}
    report = PushReport(kind, i, pid)
    pushed: dict[str, int] = {}
    for tid, rec in conn.pushed(kind).items():
        if rec["round"] == i and tid in live:
            pushed[rec["id"]] = tid
    deleted = {rec["id"] for tid, rec in conn.pushed(kind).items() if rec["round"] == i and tid not in live}
    todo = [x for x in ids if x not in pushed]
    report.already = len(ids) - len(todo)
    pool_root = Path(loop.cfg.resolve(loop.cfg.pool.root)).resolve()
    model = target_column(project, i)
    bar = tqdm(total=len(todo), desc=f"push {kind} to Label Studio", unit="task", disable=not progress)
    for a in range(0, len(todo), _BATCH):
        batch = todo[a:a + _BATCH]
        tasks = []
        for x in batch:
            url = task_image_url(x, image_url=conn.image_url, image_root=None if conn.image_url else pool_root,
                                 document_root=conn.document_root)
            task: dict[str, Any] = {"data": _data(project, i, x, url, list(classes.names))}
            if x in by_region:  # labels.kind = "regions": a polygon per asked region, the guess pre-labelled
                rt = region_task(project, i, x, url, class_names=list(classes.names), from_name=str(polygon),
                                 to_name=str(tags.image), model_version=model)
                task = {"data": {**task["data"], **rt["data"]}, "predictions": rt["predictions"]}
            elif brush is not None and tags.image is not None:
                task["predictions"] = [brush_prediction(target_map(loop, i, x), classes, from_name=brush,
                                                        to_name=tags.image, model_version=model)]
            tasks.append(task)
        task_ids = client.import_tasks(pid, tasks)
        for x, tid in zip(batch, task_ids):  # recorded batch by batch: a crash does not push twice
            conn.tasks[f"{pid}:{tid}"] = {"kind": kind, "round": i, "id": x}
            report.created.append(x)
            if x in deleted:
                report.recreated.append(x)
        save_connection(project.path, conn)
        bar.update(len(batch))
    bar.close()
    if (brush is not None or by_region) and todo and client.project(pid).get("model_version") != model:
        # Label Studio pre-labels a task with the predictions of the project's model version only (a version
        # it accepts once predictions of it exist)
        client.update_project(pid, model_version=model)
    project.journal.log_event("labelstudio-push", {"kind": kind, "ls_project": pid, "n": len(todo)}, round=i, step=kind)
    return report


__all__ = ["push", "PushReport", "Connection"]
