"""Query by committee from a scan folder alone: vote entropy of the members' saved argmax maps.

The committee's vote entropy (Seung, Opper & Sompolinsky 1992, "Query by committee", COLT; McCallum & Nigam
1998, "Employing EM and Pool-Based Active Learning for Text Classification", ICML) needs only each member's
hard vote per pixel, and a scan folder keeps every model's argmax map (`maps/<M>/`, unless scanned with
`--no-maps`). So when the `al_qbcvote__{T}` column is missing (it is added by a project's mine step or
`mine.samplers.qbc.CommitteeColumns`, which run the models again), the same number is computed from the maps of the
target T and the competitors the scan compared it with. The mean KL to the consensus needs probabilities,
which a scan does not keep: that measure still needs `CommitteeColumns`.

Per pixel, with M members and V(c) the members voting c, VE = -sum_c V(c)/M log(V(c)/M). Written per member,
the same sum is -1/M sum_m log(V(vote_m)/M): each member adds the log-share of the members agreeing with it,
which needs no class loop (M x M comparisons of the maps, M is a handful).

Public API: `vote_entropy(maps) -> float64 [n]`, `scan_vote_entropy(scan_dir, members, ids) -> float64 [n]`,
`with_vote_entropy(scan_dir, table, target) -> DataFrame` (what `mine_scan` calls for "qbc").
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from PIL import Image

from blindspots.mine.samplers.base import usable_mask
from blindspots.mine.samplers.qbc import qbc_column
from blindspots.scan import schema
from blindspots.scan.layout import ScanLayout
from blindspots.scan.maps import load_map


def vote_entropy(maps: np.ndarray) -> np.ndarray:
    """Mean per-pixel vote entropy (nats) of hard votes.

    maps: int [M, n, H, W] class ids, M >= 2 members' argmax maps of the same n images.
    Returns float64 [n]: 0 where all members vote alike, at most log M.
    """
    v = np.asarray(maps)
    if v.ndim != 4 or v.shape[0] < 2 or not np.issubdtype(v.dtype, np.integer):
        raise ValueError(f"maps: expected M >= 2 members' integer class maps [M, n, H, W], got "
                         f"{v.dtype} of shape {v.shape}")
    m = v.shape[0]
    ve = np.zeros(v.shape[1:], dtype=np.float64)
    for j in range(m):
        agree = (v == v[j]).sum(0)  # [n, H, W] members voting as member j (itself included: >= 1)
        ve -= np.log(agree / m)
    return (ve / m).reshape(v.shape[1], -1).mean(1)


def committee_names(table_columns: Sequence[str], target: str) -> list[str]:
    """The target and the competitors the scan compared it with (its `dpa__{target}__{G}` columns)."""
    comps = [g for t, g in schema.distance_pairs(list(table_columns), "dpa") if t == target]
    if not comps:
        raise ValueError(f"target: expected a scan that compared {target!r} with at least one competitor (a "
                         f"dpa__{target}__G column), got none; QBC needs a committee")
    return [target, *comps]


def scan_vote_entropy(scan_dir: str | Path, members: Sequence[str], ids: Sequence[str]) -> np.ndarray:
    """Vote entropy per image from the saved argmax maps of `members` (the target first).

    ids: [n] image ids of the scan. A member's map of another size is resized (nearest) to the target's.
    Returns float64 [n]. A missing map is a ValueError that names it and the way out.
    """
    layout = ScanLayout(scan_dir)
    out = np.empty(len(ids), dtype=np.float64)
    for i, image_id in enumerate(ids):
        maps = []
        for name in members:
            mp = load_map(layout, name, image_id)
            if mp is None:
                raise ValueError(
                    f"scan_dir: expected {name!r}'s saved argmax map of {image_id!r} for QBC's vote entropy "
                    f"({layout.map_path(name, image_id)}), got none (scanned with --no-maps?); rescan with maps "
                    "or add the columns with blindspots.mine.samplers.qbc.CommitteeColumns")
            if maps and mp.shape != maps[0].shape:
                mp = np.asarray(Image.fromarray(mp).resize(maps[0].shape[::-1], Image.NEAREST))
            maps.append(mp.astype(np.int64))
        out[i] = vote_entropy(np.stack(maps)[:, None])[0]
    return out


def with_vote_entropy(scan_dir: str | Path, table: pd.DataFrame, target: str) -> pd.DataFrame:
    """The score table with `al_qbcvote__{target}` from the saved maps when the column is missing (as is
    when present). Rows the scan could not use (`mine.samplers.base.usable_mask`) get NaN."""
    col = qbc_column(target, "vote")
    if col in table.columns:
        return table
    members = committee_names(table.columns, target)
    rows = np.flatnonzero(usable_mask(table))
    values = np.full(len(table), np.nan)
    values[rows] = scan_vote_entropy(scan_dir, members, table[schema.ID].to_numpy(object)[rows].tolist())
    return table.assign(**{col: values})
