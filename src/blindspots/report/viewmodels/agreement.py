"""Rater agreement on the 1-5 ratings of mined candidates, in simple, stated terms.

Per image (its finite scores only; out-of-domain flags are not scores): n, span (max - min) and the
mean absolute difference over all pairs of its ratings. Over the images rated at least twice: the
share whose ratings span <= 1 (raters agree within one step) and the mean pairwise |difference|.
"""
from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd


def per_image_agreement(ratings: pd.DataFrame) -> pd.DataFrame:
    """One row per image id of `ratings` (columns id, score; score NaN/inf = out-of-domain):
    n_scores, span, mean_abs_diff (NaN for images with fewer than 2 scores); indexed by id."""
    if not {"id", "score"} <= set(ratings.columns):
        raise ValueError(f"ratings: expected columns id and score, got {list(ratings.columns)}")
    rows = []
    for image_id, g in ratings.groupby("id", sort=False):
        s = g["score"].to_numpy(dtype=np.float64)
        s = s[np.isfinite(s)]
        pairs = [abs(a - b) for a, b in combinations(s, 2)]
        rows.append({"id": image_id, "n_scores": len(s), "span": float(s.max() - s.min()) if len(s) > 1 else np.nan,
                     "mean_abs_diff": float(np.mean(pairs)) if pairs else np.nan})
    return pd.DataFrame(rows, columns=["id", "n_scores", "span", "mean_abs_diff"]).set_index("id")


def agreement_summary(per_image: pd.DataFrame) -> dict:
    """From `per_image_agreement`: n_images (rated at least twice), share_span_le_1 and
    mean_abs_diff over them (None when no image has 2 scores)."""
    multi = per_image[per_image["n_scores"] >= 2]
    if not len(multi):
        return {"n_images": 0, "share_span_le_1": None, "mean_abs_diff": None}
    return {"n_images": int(len(multi)), "share_span_le_1": float((multi["span"] <= 1).mean()),
            "mean_abs_diff": float(multi["mean_abs_diff"].mean())}
