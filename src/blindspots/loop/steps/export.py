"""Step ``export`` (label plan): S(i+1) ∪ T(i+1) with the target's prediction, for pixel labelling
in the user's own tool; and `export_annotation`, the CVAT / Label Studio writer `blindspots
export` shares."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from blindspots.atomic import write_atomic
from blindspots.data.formats import export_cvat, export_labelstudio
from blindspots.data.formats.labelstudio import labeling_config
from blindspots.data.formats.masks import write_masks
from blindspots.ids import artifact_name
from blindspots.loop.context import LoopContext, target_column
from blindspots.loop.maps import target_map
from blindspots.loop.project import Project
from blindspots.loop.steps.base import Step
from blindspots.loop.steps.masks import masks_needed

__all__ = ["ExportStep", "export_dir", "export_annotation"]

log = logging.getLogger(__name__)


class ExportStep(Step):
    """reports/round-<i>/: images/ (the pool images as PNG), predictions/ (the target's argmax index
    PNGs, a pre-annotation), S.csv and T.csv (id, score, reason), cvat.zip and labelstudio.json (as
    `blindspots export` writes)."""

    name = "export"

    def settings(self, ctx: LoopContext) -> dict:
        return {"formats": ["images", "predictions", "cvat", "labelstudio"]}

    def run(self, ctx: LoopContext, i: int, seed: int) -> dict:
        p = ctx.project
        out = export_dir(p, i)
        (out / "images").mkdir(parents=True, exist_ok=True)
        ids = masks_needed(p, i)
        preds = {x: target_map(ctx, i, x) for x in ids}
        for x in ids:
            image = np.ascontiguousarray(ctx.pool.load(x))
            write_atomic(out / "images" / artifact_name(x), lambda tmp: Image.fromarray(image).save(tmp, format="PNG"))
        write_masks(out / "predictions", preds, classes=ctx.classes)
        for kind in ("S", "T"):
            p.answers.candidates(i, kind).to_csv(out / f"{kind}.csv", index=False)
        files = ["images/", "predictions/", "S.csv", "T.csv"]
        if ids:
            export_annotation(ctx, i, "cvat", out / "cvat.zip", ids, preds)
            # Label Studio serves the pool's own files, as `blindspots export` does by default (the bare
            # `?d=<id>` URL is right only when a document root's subfolder path equals the ids)
            try:
                export_annotation(ctx, i, "labelstudio", out / "labelstudio.json", ids, preds,
                                  image_root=ctx.cfg.location(ctx.cfg.pool.root))
            except ValueError as e:  # e.g. the pool is the document root itself
                log.warning("round %d: labelstudio.json gets bare ?d=<id> image URLs (%s); export it again with "
                            "image_root= or image_url= (`Project.export`, the `export` command)", i, e)
                export_annotation(ctx, i, "labelstudio", out / "labelstudio.json", ids, preds)
            files += ["cvat.zip", "labelstudio.json", labelstudio_config_path(out / "labelstudio.json").name]
        return {"folder": str(out), "files": files, "n_S": int(len(p.answers.candidates(i, "S"))),
                "n_T": int(len(p.answers.candidates(i, "T")))}


def export_dir(project: Project, i: int) -> Path:
    """Where the label plan exports round i's S ∪ T: reports/round-<i>/."""
    return project.reports_dir / f"round-{int(i)}"


def export_annotation(ctx: LoopContext, i: int, fmt: str, path: Path, ids: list[str],
                      preds: dict[str, np.ndarray], **image_location: Any) -> Path:
    """Write round i's images `ids` with the target's predictions `preds` (id -> int [H, W]) as a CVAT
    zip (fmt "cvat", images included) or Label Studio JSON tasks (fmt "labelstudio").

    image_location: Label Studio's image_url / image_root / document_root (see task_image_url).
    """
    if fmt == "cvat":
        return export_cvat(path, preds, ctx.classes, images={x: ctx.pool.load(x) for x in ids})
    urls = None if image_location.get("image_url") else ctx.pool.urls(ids)  # an object store: the objects' URLs
    out = export_labelstudio(path, preds, ctx.classes, model_version=target_column(ctx.project, i),
                             image_urls=urls, **image_location)
    write_labelstudio_config(Path(path), ctx.classes)
    return out


def labelstudio_config_path(tasks: Path) -> Path:
    """Where the labelling config of a Label Studio task file goes: `<name>_config.xml` beside it."""
    return Path(tasks).with_name(Path(tasks).stem + "_config.xml")


def write_labelstudio_config(tasks: Path, classes: Any) -> Path:
    """Label Studio's labelling config (one brush label per class, in the class colours) beside the
    tasks, to paste into the project's Settings → Labeling Interface before importing them."""
    path = labelstudio_config_path(tasks)
    path.write_text(labeling_config(classes), encoding="utf-8")
    return path
