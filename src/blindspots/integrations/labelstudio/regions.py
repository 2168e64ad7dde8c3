"""Region questions as Label Studio tasks: one task per image of S with a polygon per asked region, each
pre-labelled with the target's guess; a person relabels the polygons that are wrong and deletes those that
are mixed / unsure. Pulled back, each polygon's label becomes the answer of its region
(`blindspots.loop.regions.add_region_answer`), a deleted polygon "mixed / unsure", and the image's partial
mask is written once every region has an answer, as on the app's region page.

Polygons carry the id `region-<region id>` (Label Studio keeps a pre-annotation's result ids in the
annotation made from it); a polygon without such an id is matched to the asked region holding most of its
area. Points are in percent of the image's width and height, as Label Studio stores them.

Public API: `region_polygons(segments, region) -> [[x %, y %], ...]`, `region_task(project, round, image_id,
url, *, from_name, to_name) -> dict`, `pull_region_annotation(project, round, image_id, results, annotator)
-> dict[int, int | None]`.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from blindspots.loop import regions as rq

# Lazy imports: skimage (contours; the Label Studio commands start without it).

__all__ = ["region_polygons", "region_task", "pull_region_annotation", "RESULT_PREFIX"]

RESULT_PREFIX = "region-"


def region_polygons(segments: np.ndarray, region: int) -> list[list[float]]:
    """The outline of `region` in int [H, W] `segments` as polygon points [x %, y %] (its largest
    connected part: SLIC regions are connected), on pixel corners so the polygon covers the region."""
    from skimage.measure import find_contours

    inside = np.asarray(segments) == region
    if not inside.any():
        raise ValueError(f"region: expected a region id present in segments, got {region}")
    h, w = inside.shape
    # upsampled x2 and padded: contours at 0.5 then run along pixel edges, not through pixel centres
    big = np.pad(np.repeat(np.repeat(inside, 2, 0), 2, 1), 1).astype(float)
    contour = max(find_contours(big, 0.5), key=len)
    # big coordinate X = 2 x + 0.5 for the image's continuous coordinate x (0 at the left edge)
    return [[float(np.clip((c - 0.5) / 2, 0, w) / w * 100), float(np.clip((r - 0.5) / 2, 0, h) / h * 100)]
            for r, c in contour]


def region_task(project: Any, round: int, image_id: str, url: str, *, class_names: Sequence[str],
                from_name: str = "label", to_name: str = "image", model_version: str = "regions") -> dict[str, Any]:
    """One Label Studio task: the image, its id and round, and a prediction with a polygon per asked region
    labelled with the target's guess (`polygonlabels` of `from_name` on `to_name`)."""
    seg = rq.segments(project, round, image_id)
    h, w = seg.shape
    result = []
    for q in rq.queries(project, round, image_id):
        result.append({"id": f"{RESULT_PREFIX}{q.region}", "type": "polygonlabels", "from_name": from_name,
                       "to_name": to_name, "original_width": int(w), "original_height": int(h), "image_rotation": 0,
                       "value": {"points": region_polygons(seg, q.region), "closed": True,
                                 "polygonlabels": [class_names[q.guess]]}})
    return {"data": {"image": url, "blindspots_id": image_id, "round": int(round), "set": "S", "kind": "regions"},
            "predictions": [{"model_version": model_version, "result": result}]}


def _polygon_pixels(points: Sequence[Sequence[float]], h: int, w: int) -> np.ndarray:
    """bool [H, W]: the pixels whose centres lie in the polygon (points in percent; skimage puts pixel
    centres on whole coordinates, hence the half-pixel shift)."""
    from skimage.draw import polygon

    out = np.zeros((h, w), dtype=bool)
    if len(points) >= 3:
        xy = np.asarray(points, dtype=float)
        rr, cc = polygon(xy[:, 1] * h / 100.0 - 0.5, xy[:, 0] * w / 100.0 - 0.5, shape=(h, w))
        out[rr, cc] = True
    return out


def pull_region_annotation(project: Any, round: int, image_id: str, results: Sequence[Mapping[str, Any]],
                           annotator: str, *, class_names: Sequence[str], ignore_index: int = 255) -> dict[int, int | None]:
    """Store one annotation's answers (region -> class id, None for a deleted polygon: mixed / unsure) and
    write the image's partial mask; returns the answers. ValueError naming a label that is no class."""
    seg = rq.segments(project, round, image_id)
    asked = [q.region for q in rq.queries(project, round, image_id)]
    said: dict[int, int | None] = {}
    for k, r in enumerate(results):
        if str(r.get("type", "")).lower() != "polygonlabels":
            continue
        labels = (r.get("value") or {}).get("polygonlabels") or []
        if len(labels) != 1 or labels[0] not in class_names:
            raise ValueError(f"results[{k}]: expected one polygon label of {list(class_names)}, got {labels}")
        rid = str(r.get("id", ""))
        region = int(rid[len(RESULT_PREFIX):]) if rid.startswith(RESULT_PREFIX) and \
            rid[len(RESULT_PREFIX):].isdigit() else None
        if region not in asked:  # drawn anew: the asked region it covers most
            px = _polygon_pixels((r.get("value") or {}).get("points") or [], *seg.shape)
            cover = [int((px & (seg == a)).sum()) for a in asked]
            region = asked[int(np.argmax(cover))] if cover and max(cover) > 0 else None
        if region is not None:
            said[region] = list(class_names).index(labels[0])
    for region in asked:
        said.setdefault(region, None)  # deleted: mixed / unsure
    for region, label in said.items():
        rq.add_region_answer(project, round, image_id, region, annotator, label)
    rq.finish_image(project, round, image_id, ignore_index=ignore_index, annotator=annotator)
    return said
