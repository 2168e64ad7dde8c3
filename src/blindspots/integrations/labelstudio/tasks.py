"""Label Studio tasks of a round: the data (image URL, id, set, MAD rank / score / reason, MOS) and
the target's prediction as a pre-annotation, its brush RLE written by Label Studio's own converter
(`label_studio_sdk.converter.brush.mask2rle`), so what Label Studio decodes is what it wrote itself."""
from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np

from blindspots.data.classes import Classes

# Lazy imports: pandas, pyarrow.parquet (the Label Studio commands start without them); label_studio_sdk (optional:
# only the call that uses it needs it).


def brush_prediction(mask: np.ndarray, classes: Classes, *, from_name: str, to_name: str, model_version: str,
                     score: float | None = None) -> dict[str, Any]:
    """A Label Studio prediction: one brushlabels region per class present in `mask` (int [H, W]);
    ignore pixels (>= the number of classes) stay unpainted."""
    from label_studio_sdk.converter.brush import mask2rle

    m = np.asarray(mask)
    if m.ndim != 2:
        raise ValueError(f"mask: expected a 2-D [H, W] class-id mask, got shape {m.shape}")
    h, w = m.shape
    result = []
    for k in np.unique(m).tolist():
        if k >= classes.num_classes:
            continue
        name = classes.names[int(k)]
        result.append({"id": f"pred{int(k)}", "type": "brushlabels", "from_name": from_name, "to_name": to_name,
                       "original_width": int(w), "original_height": int(h), "image_rotation": 0,
                       "readonly": False,
                       "value": {"format": "rle", "rle": mask2rle((m == k).astype(np.uint8) * 255),
                                 "brushlabels": [name]}})
    out: dict[str, Any] = {"model_version": model_version, "result": result}
    if score is not None and np.isfinite(score):
        out["score"] = float(score)
    return out


def candidate_fields(row: Mapping[str, Any] | None, prefix: str, class_names: list[str]) -> dict[str, Any]:
    """`rank`, `score` and `reason` of a candidate row (M: the mining pick; S: the MOS) as task data
    fields `<prefix>_rank`, ... (the Data Manager sorts and filters by them); the reason in words."""
    from blindspots.mine.reasons import describe

    if row is None:
        return {}
    out: dict[str, Any] = {f"{prefix}_rank": int(row["rank"]) + 1}
    score = row.get("score")
    if score is not None and np.isfinite(float(score)):
        out[f"{prefix}_score"] = float(score)
    reason = str(row.get("reason") or "")
    if reason:
        out[f"{prefix}_reason"] = describe(reason, class_names)
        try:
            json.loads(reason)
            out[f"{prefix}_reason_json"] = reason
        except ValueError:
            pass
    return out
