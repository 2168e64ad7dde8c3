"""The other models' maps the label editor offers to adopt ("take the competitor's region"): the
competitors' argmax maps saved by the project's scan, or a review set's predicted mask."""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from blindspots.app.project_view import NotFound, ProjectView, inside, read_index_png
from blindspots.scan.layout import find_map


def competitor_maps(view: ProjectView, round: int, image_id: str) -> list[tuple[str, np.ndarray]]:
    """(competitor name, uint8 [H, W] argmax map) of every competitor with a saved map of `image_id`,
    the one that disagrees most with the target's prediction first (MAD mined it for that pair)."""
    project = view.project
    target = view.prediction(round, image_id)
    out = []
    for comp in project.config.competitors:
        path = find_map(project.scan_dir, comp.name, image_id)
        if path is None or not inside(path, project.scan_dir):
            continue
        out.append((comp.name, read_index_png(path)))
    if target is not None:
        out.sort(key=lambda nm: -float((nm[1] != target).mean()) if nm[1].shape == target.shape else 0.0)
    return out


def review_prediction(view: ProjectView, set_name: str, image_id: str) -> list[tuple[str, np.ndarray]]:
    """[("model", uint8 [H, W])]: the review set's predicted mask of `image_id`, or [] if it has none."""
    try:
        return [("model", view.review_layer(set_name, image_id, "pred"))]
    except NotFound:
        return []


def component_at(labels: np.ndarray, y: int, x: int) -> np.ndarray:
    """bool [H, W]: the 4-connected region of equal value in `labels` [H, W] containing pixel (y, x)."""
    lab = np.asarray(labels)
    if lab.ndim != 2 or not (0 <= y < lab.shape[0] and 0 <= x < lab.shape[1]):
        raise ValueError(f"(y, x): expected a pixel inside {lab.shape}, got {(y, x)}")
    comp, _ = ndimage.label(lab == lab[y, x])
    return comp == comp[y, x]
