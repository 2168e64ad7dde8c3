"""What people labelled of a region-labelled image, for the round page: their answers drawn over the
image (unlabelled pixels left clear), the asked regions outlined, and what it cost in label-editor actions
(`blindspots.human.cost.C_REGION` an answer)."""
from __future__ import annotations

import numpy as np

from blindspots.human.cost import C_REGION
from blindspots.loop import Project
from blindspots.loop import regions as rq
from blindspots.report.drawing.overlays import overlay, resize_labels

__all__ = ["region_layer"]

OUTLINE = np.array([255, 230, 0], dtype=np.uint8)


def region_layer(p: Project, i: int, image_id: str, mask: np.ndarray, small: np.ndarray, palette: np.ndarray,
                 ignore_index: int) -> tuple[str, np.ndarray] | None:
    """(caption, uint8 [h, w, 3] thumbnail) of an image whose mask came from region answers, or None when it
    did not. mask: uint8 [H, W] the stored partial mask; small: uint8 [h, w, 3] the image's thumbnail."""
    asked = rq.queries(p, i, image_id)
    if not asked:
        return None
    answers = rq.answers(p, i, image_id)
    seg = resize_labels(rq.segments(p, i, image_id), small.shape[:2])
    out = overlay(small, mask, palette, clear=(ignore_index,))
    on = np.isin(seg, [q.region for q in asked])
    edge = np.zeros_like(on)  # a pixel of an asked region next to a pixel of another region
    edge[:-1] |= on[:-1] & (seg[:-1] != seg[1:])
    edge[1:] |= on[1:] & (seg[1:] != seg[:-1])
    edge[:, :-1] |= on[:, :-1] & (seg[:, :-1] != seg[:, 1:])
    edge[:, 1:] |= on[:, 1:] & (seg[:, 1:] != seg[:, :-1])
    out[edge] = OUTLINE
    n_mixed = sum(v is None for v in answers.values())
    share = float((mask != ignore_index).mean())
    caption = (f"region answers: {len(answers)} of {len(asked)} regions ({n_mixed} mixed / unsure), "
               f"{len(answers) * C_REGION:g} actions, {share:.0%} of the pixels labelled")
    return caption, out
