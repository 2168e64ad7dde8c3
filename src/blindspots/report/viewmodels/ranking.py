"""Ranking stability of Table 1 (MAD paper, Appendix C): do the models keep their order as the test
set T grows?

The models are ranked by mIoU on the top-k images of T (T ordered by MOS, lowest first: the most
confirmed failures first); each top-k ranking is compared with the ranking at the largest k (all of
T, the reference) by Spearman's rank correlation (SRCC), for k from half of T up to all of it. SRCC
of the mIoU values equals the SRCC of the rankings they induce. The SRCC is `loop.ranking.ranking_stability`'s
(one rule); this module picks the page's k range and adds each model's mIoU at each k.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import pandas as pd

from blindspots.metrics import mean_iou
from blindspots.loop.ranking import ranking_stability


def topk_srcc(confusions: Mapping[str, np.ndarray], k_min: int | None = None) -> pd.DataFrame:
    """SRCC between each top-k ranking and the ranking on all N images.

    confusions: per model, int [N, K, K] per-image confusion matrices (rows: truth), the N images
    in top-k order (lowest MOS first) and the same for every model; at least 2 models.
    k_min: smallest k (default ceil(N / 2), at least 1).
    Returns one row per k in k_min..N: k, srcc (NaN where a ranking is all ties), and one column
    `miou <model>` per model.
    """
    names = list(confusions)
    if len(names) < 2:
        raise ValueError(f"confusions: expected at least 2 models, got {len(names)}")
    stacks = {m: np.asarray(confusions[m]) for m in names}
    shapes = {v.shape for v in stacks.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 3 or next(iter(shapes))[0] < 1:
        raise ValueError(f"confusions: expected [N, K, K] arrays of one shape with N >= 1, got {sorted(shapes)}")
    n = next(iter(shapes))[0]
    k_min = max(1, math.ceil(n / 2)) if k_min is None else int(k_min)
    if not 1 <= k_min <= n:
        raise ValueError(f"k_min: expected 1..{n}, got {k_min}")
    cum = {m: np.cumsum(v, axis=0) for m, v in stacks.items()}  # cum[m][k-1]: confusion of the top-k
    frame = ranking_stability(stacks, ks=range(k_min, n + 1))[["k", "srcc"]]
    for m in names:
        frame[f"miou {m}"] = [mean_iou(cum[m][k - 1]) for k in frame["k"]]
    return frame
