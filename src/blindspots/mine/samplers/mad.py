"""MAD (maximum discrepancy) selection of candidate failures M — Eq. (2) and Algorithm 1
(steps 8-15) of "Efficiently troubleshooting image segmentation models with human-in-the-loop".

For each competitor g_j and each class k, the pool is partitioned by the *target's* argmax map:
image x is in D_{t,k} if class k covers a pixel fraction of f_t(x) inside [p_k, q_k] (and at
least one pixel). The top n3 images of D_{t,k} by d(f_t(x), g_j(x)) are kept. The same is
repeated with the roles reversed (partition by g_j's map, same distance). The union over all
(j, k, direction), de-duplicated, is M; each image keeps every reason it was picked for.

Works only on the score table (contract columns `frac__{M}__{k}`, `dpa__{T}__{G}` /
`dmiou__{T}__{G}`, `status`): per competitor, one argpartition keeps the head of the
distance order (sorted); each (class, direction) sub-problem takes its top n3 from that head
(exact: falls back to all its members when the head holds fewer than n3) (about a second for 10^6
rows x 5 competitors x 20 classes on 2 CPU cores).

Public API (stable):
- `class_area_ranges(masks, num_classes, *, ignore_index=255, quantiles=(0.25, 0.75))
   -> float64 [C, 2]`: the paper's default [p_k, q_k] (quartiles of class k's relative area
   over the training labels; NaN rows for classes never present).
- `class_area_mean_sd(masks, num_classes)` and `released_settings(masks, num_classes, background=0)`: the
   size windows (mean -+ sd) and settings (background excluded, mIoU distance) of the released code.
- `MADSampler(target=None, competitors=None, *, distance="pixel", n3=25, ranges=None,
   class_ids=None, both_directions=True, classes=None)`; `.fit(masks)` sets `ranges_` from
   training masks; `.select(table, n=None, *, seed=0)` -> DataFrame with columns
   `id, score, reason, n_picks, best_rank`; `.picks_` holds the long-form picks
   (`id, competitor, class_id, direction, distance, rank`) of the last selection.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from blindspots.data.classes import DEFAULT_IGNORE_INDEX, Classes
from blindspots.scan import schema
from blindspots.mine.samplers.base import (
    Sampler, check_n, check_table, column, distance_pairs, dumps_reason, frac_models,
    ids_at, infer_target, result_frame, top_n_indices, usable_mask,
)

log = logging.getLogger(__name__)

_DISTANCES = {"pixel": "dpa", "dpa": "dpa", "miou": "dmiou", "dmiou": "dmiou"}
HEAD_MIN = 65_536  # rows kept sorted per competitor; larger costs a little time, never changes picks


def class_area_ranges(masks: Iterable[np.ndarray], num_classes: int, *, ignore_index: int | None = DEFAULT_IGNORE_INDEX,
                      quantiles: tuple[float, float] = (0.25, 0.75), progress: bool = False) -> np.ndarray:
    """Content-constraint bounds [p_k, q_k] from labelled masks (the paper's default: quartiles).

    masks: iterable of int [H, W] label maps (the target's training labels S0); ignore_index
        pixels count in the image area (the paper divides by h x w) but never as a class.
    num_classes: C.
    quantiles: (lower, upper) quantiles of class k's relative area over the images containing
        class k; the paper uses the first and third quartiles (0.25, 0.75).
    Returns float64 [C, 2]; a class never present gives a NaN row (MAD skips it).
    """
    lo, hi = quantiles
    if not (0.0 <= lo <= hi <= 1.0):
        raise ValueError(f"quantiles: expected 0 <= lower <= upper <= 1, got {quantiles!r}")
    areas = class_areas(masks, num_classes, ignore_index=ignore_index, progress=progress)
    out = np.full((num_classes, 2), np.nan)
    for k, a in enumerate(areas):
        if a:
            out[k] = np.quantile(np.asarray(a), [lo, hi])
    return out


def class_area_mean_sd(masks: Iterable[np.ndarray], num_classes: int, *,
                       ignore_index: int | None = DEFAULT_IGNORE_INDEX) -> np.ndarray:
    """[p_k, q_k] = mean -+ one standard deviation of class k's relative area over the masks containing it
    (clipped to [0, 1]): the size windows of the paper's released code. float64 [C, 2], NaN rows for
    classes never present."""
    out = np.full((num_classes, 2), np.nan)
    for k, a in enumerate(class_areas(masks, num_classes, ignore_index=ignore_index)):
        if a:
            m, sd = float(np.mean(a)), float(np.std(a))
            out[k] = (max(0.0, m - sd), min(1.0, m + sd))
    return out


def class_areas(masks: Iterable[np.ndarray], num_classes: int, *, ignore_index: int | None = DEFAULT_IGNORE_INDEX,
                progress: bool = False) -> list[list[float]]:
    """Per class, its relative area (pixels / image area) in each mask that contains it."""
    if not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
        raise ValueError(f"num_classes: expected an integer >= 1, got {num_classes!r}")
    areas: list[list[float]] = [[] for _ in range(num_classes)]
    for i, mask in enumerate(tqdm(masks, desc="class areas", disable=not progress, unit="mask")):
        m = np.asarray(mask)
        if m.ndim != 2 or m.size == 0:
            raise ValueError(f"masks: expected int [H, W] arrays, got shape {m.shape} at position {i}")
        flat = m.ravel().astype(np.int64)
        valid = (flat >= 0) & (flat < num_classes)
        bad = ~valid & (flat != (ignore_index if ignore_index is not None else -1))
        if bad.any():
            raise ValueError(f"masks: expected values in 0..{num_classes - 1} or ignore_index={ignore_index}, "
                             f"got {int(flat[bad][0])} at position {i}")
        counts = np.bincount(flat[valid], minlength=num_classes)
        for k in np.flatnonzero(counts):
            areas[k].append(counts[k] / flat.size)
    return areas


def released_settings(masks: Iterable[np.ndarray], num_classes: int, *, background: int = 0,
                      ignore_index: int | None = DEFAULT_IGNORE_INDEX) -> dict[str, Any]:
    """MADSampler settings as the paper's released code runs MAD: the background class left out of the
    partition, the mIoU distance, and size windows mean -+ sd of each class's pixel share over `masks`."""
    ranges = class_area_mean_sd(masks, num_classes, ignore_index=ignore_index)
    return {"distance": "miou", "ranges": ranges,
            "class_ids": [k for k in range(num_classes) if k != background and np.isfinite(ranges[k]).all()]}


def class_area_ranges_from_table(table: pd.DataFrame, model: str, *,
                                 quantiles: tuple[float, float] = (0.25, 0.75),
                                 num_classes: int | None = None) -> np.ndarray:
    """[p_k, q_k] from a model's own predictions on the pool: the quantiles of `frac__M__k` over the
    usable rows where class k is predicted at all.

    For pools without training labels: the paper takes the quartiles of class k's area in the
    target's *training labels*; these are the quartiles of its area in the *target's maps* of the
    pool, so a class the target over- or under-segments shifts its own range.
    Usable rows are the ones a sampler may pick (`usable_mask`): status 'ok', and exact duplicates
    (same `content_hash`) counted once, so a copied image does not pull the quantiles towards itself.
    num_classes: rows of the result (default: the highest class with a frac column + 1).
    Returns float64 [C, 2]; NaN rows for classes the model never predicts (MAD skips them).
    """
    lo, hi = quantiles
    if not (0.0 <= lo <= hi <= 1.0):
        raise ValueError(f"quantiles: expected 0 <= lower <= upper <= 1, got {quantiles!r}")
    fracs = frac_models(table)
    if model not in fracs:
        raise ValueError(f"model: expected a model with frac columns in the table {sorted(fracs)}, got {model!r}")
    top = max(fracs[model]) + 1
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                    or num_classes < top):
        raise ValueError(f"num_classes: expected an int >= {top} (the table has frac columns up to class "
                         f"{top - 1} for {model!r}), got {num_classes!r}")
    ok = usable_mask(table)
    out = np.full((top if num_classes is None else num_classes, 2), np.nan)
    for k in fracs[model]:
        f = column(table, schema.frac(model, k))[ok]
        f = f[np.isfinite(f) & (f > 0)]
        if len(f):
            out[k] = np.quantile(f, [lo, hi])
    return out


def _as_ranges(ranges: Any, num_classes: int | None = None) -> dict[int, tuple[float, float]]:
    """ranges given as array [C, 2] or {class_id: (p, q)} -> dict (NaN rows dropped)."""
    if isinstance(ranges, Mapping):
        items = [(int(k), v) for k, v in ranges.items()]
    else:
        arr = np.asarray(ranges, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise ValueError(f"ranges: expected an array [C, 2] or a dict class_id -> (p, q), got shape {arr.shape}")
        items = list(enumerate(arr))
    out: dict[int, tuple[float, float]] = {}
    for k, v in items:
        p, q = (float(x) for x in v)
        if np.isnan(p) or np.isnan(q):
            continue
        if not (0.0 <= p <= q <= 1.0):
            raise ValueError(f"ranges: expected 0 <= p_k <= q_k <= 1 for class {k}, got ({p}, {q})")
        out[k] = (p, q)
    return out


def _sorted_head(d: np.ndarray, size: int) -> np.ndarray:
    """Rows with the largest finite distances, sorted by distance desc then row asc.

    Holds every row whose distance is >= the size-th largest (ties at the cut included), so
    any row outside the head is strictly farther down than every row in it. int64 [>= size].
    """
    finite = np.isfinite(d)
    n_finite = int(finite.sum())
    if n_finite == 0:
        return np.empty(0, dtype=np.int64)
    key = np.where(finite, d, -np.inf)
    if size < n_finite:
        kth = np.partition(key, len(key) - size)[len(key) - size]
        idx = np.flatnonzero(key >= kth)
    else:
        idx = np.flatnonzero(finite)
    return idx[np.lexsort((idx, -key[idx]))].astype(np.int64)


def _first_members(head: np.ndarray, d: np.ndarray, member: np.ndarray, n: int) -> np.ndarray:
    """Top-n members by distance (desc, ties by row): exact, the same as sorting all members.

    head: `_sorted_head` of d. If the head holds >= n members they are the answer (every
    row outside the head is farther down); otherwise fall back to all members.
    """
    hit = head[member[head]]
    if len(hit) >= n:
        return hit[:n]
    return top_n_indices(d, n, np.flatnonzero(member))


class MADSampler(Sampler):
    """Content-aware MAD competition between a target and competitors (paper Eq. 2).

    target: name of the target model f_t in the score table (None: inferred from the distance
        columns).
    competitors: names of g_1..g_m (None: every model with a distance column against target).
    distance: "pixel" (1 - pixel accuracy, `dpa__`) or "miou" (1 - mIoU, `dmiou__`); the paper
        allows either, default "pixel".
    n3: images kept per (competitor, class, direction); paper: 25.
    ranges: [p_k, q_k] per class, float [C, 2] or {k: (p, q)}; None: use `ranges_` from `fit`
        (the paper's default: quartiles of the training labels), or if not fitted, no size
        constraint beyond "at least one pixel" (logged as a warning).
    class_ids: classes to partition by (None: every class with `frac__` columns).
    both_directions: also partition by each competitor's map (the paper does).
    classes: optional `Classes`, only to write class names into `reason`.
    """

    def __init__(self, target: str | None = None, competitors: Sequence[str] | None = None, *,
                 distance: str = "pixel", n3: int = 25, ranges: Any = None,
                 class_ids: Sequence[int] | None = None, both_directions: bool = True,
                 classes: Classes | None = None) -> None:
        self.target = target
        self.competitors = None if competitors is None else list(competitors)
        self.distance = distance
        self.n3 = n3
        self.ranges = ranges
        self.class_ids = None if class_ids is None else [int(k) for k in class_ids]
        self.both_directions = both_directions
        self.classes = classes

    def fit(self, masks: Iterable[np.ndarray], num_classes: int | None = None, *,
            ignore_index: int | None = DEFAULT_IGNORE_INDEX, quantiles: tuple[float, float] = (0.25,
            0.75)) -> "MADSampler":
        """Set `ranges_` to the quartiles of each class's relative area in training masks (paper).

        masks: iterable of int [H, W]; num_classes: C (defaults to len(classes)).
        """
        if num_classes is None:
            if self.classes is None:
                raise ValueError("num_classes: expected an int (or construct the sampler with classes=), got None")
            num_classes = self.classes.num_classes
        self.ranges_ = class_area_ranges(masks, num_classes, ignore_index=ignore_index, quantiles=quantiles)
        return self

    # -- selection -----------------------------------------------------------------------

    def _resolve(self, table: pd.DataFrame) -> tuple[str, str, list[str], list[int], dict[int, tuple[float, float]]]:
        if self.distance not in _DISTANCES:
            raise ValueError(f"distance: expected one of {sorted(_DISTANCES)}, got {self.distance!r}")
        kind = _DISTANCES[self.distance]
        if isinstance(self.n3, bool) or not isinstance(self.n3, (int, np.integer)) or self.n3 < 1:
            raise ValueError(f"n3: expected an integer >= 1, got {self.n3!r}")
        target = self.target if self.target is not None else infer_target(table, kind)
        fracs = frac_models(table)
        if target not in fracs:
            raise ValueError(f"target: expected `{schema.frac(target, 0)[:-1]}{{k}}` columns in the table, "
                             f"got models {sorted(fracs)}")
        pairs = [g for t, g in distance_pairs(table, kind) if t == target]
        competitors = self.competitors if self.competitors is not None else pairs
        if not competitors:
            raise ValueError(f"competitors: expected at least one `{kind}__{target}__{{G}}` column, got none")
        class_ids = self.class_ids if self.class_ids is not None else fracs[target]
        need = [schema.pair(kind, target, g) for g in competitors]
        need += [schema.frac(target, k) for k in class_ids]
        if self.both_directions:
            need += [schema.frac(g, k) for g in competitors for k in class_ids]
        check_table(table, need)
        if self.ranges is not None:
            ranges = _as_ranges(self.ranges)
        elif getattr(self, "ranges_", None) is not None:
            ranges = _as_ranges(self.ranges_)
        else:
            log.warning("MAD: no class-size ranges given or fitted; using (0, 1] for every class "
                        "(the paper uses the quartiles of the training labels: call fit(masks))")
            ranges = {k: (0.0, 1.0) for k in class_ids}
        skipped = [k for k in class_ids if k not in ranges]
        if skipped:
            log.info("MAD: classes %s have no size range (absent from training labels); skipped", skipped)
        return kind, target, list(competitors), [k for k in class_ids if k in ranges], ranges

    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        """Candidate set M from the score table.

        table: score table; only rows with status 'ok' and a finite distance are picked.
        n: keep at most n images of M (None: all of M, at most 2 * m * C * n3).
        seed: accepted for the common interface; MAD is deterministic (ties: lower row first).
        Returns DataFrame in priority order with columns:
          id (str), score (float64: largest distance among its picks), reason (JSON:
          {"distance", "target", "picks": [{"competitor", "class", "by", "d", "rank"}, ...]}),
          n_picks (int), best_rank (int, 0 = top of some sub-problem).
        Priority: best rank in any sub-problem first (so truncating to n keeps every
        (competitor, class, direction) represented), then larger distance, then row order.
        """
        check_table(table, [])
        n = check_n(n)
        kind, target, competitors, class_ids, ranges = self._resolve(table)
        ok = usable_mask(table)
        part_cache: dict[tuple[str, int], np.ndarray] = {}

        def members(model: str, k: int) -> np.ndarray:
            """bool [N]: image in D_{model,k} (class k present with fraction in [p_k, q_k], status ok)."""
            key = (model, k)
            if key not in part_cache:
                f = column(table, schema.frac(model, k), np.float32)
                p, q = ranges[k]
                part_cache[key] = ok & (f > 0) & (f >= np.float32(p)) & (f <= np.float32(q))
            return part_cache[key]

        # sub-problems take their top n3 from the head of each competitor's distance order
        head_size = min(len(table), max(HEAD_MIN, 8 * int(self.n3) * max(1, len(class_ids))))
        rows, comp, cls, direc, dist, rank = [], [], [], [], [], []
        for g in tqdm(competitors, desc="MAD", unit="competitor", disable=len(table) < 200_000):
            d = column(table, schema.pair(kind, target, g))
            head = _sorted_head(d, head_size)
            parts = [("target", target)] + ([("competitor", g)] if self.both_directions else [])
            for direction, model in parts:
                for k in class_ids:
                    top = _first_members(head, d, members(model, k), int(self.n3))
                    rows.append(top)
                    dist.append(d[top])
                    rank.append(np.arange(len(top)))
                    comp += [g] * len(top)
                    cls += [k] * len(top)
                    direc += [direction] * len(top)
        row = np.concatenate(rows) if rows else np.empty(0, np.int64)
        picks = pd.DataFrame({
            "row": row, "competitor": np.asarray(comp, dtype=object), "class_id": np.asarray(cls, dtype=np.int64),
            "direction": np.asarray(direc, dtype=object),
            "distance": np.concatenate(dist) if dist else np.empty(0),
            "rank": np.concatenate(rank) if rank else np.empty(0, np.int64),
        })
        picks.insert(0, "id", ids_at(table, picks["row"].to_numpy()) if len(picks) else np.empty(0, object))
        self.picks_ = picks.drop(columns="row")
        return self._aggregate(picks, kind, target, n)

    def _aggregate(self, picks: pd.DataFrame, kind: str, target: str, n: int | None) -> pd.DataFrame:
        if picks.empty:
            return result_frame([], np.empty(0), [], n_picks=np.empty(0, np.int64), best_rank=np.empty(0, np.int64))
        row = picks["row"].to_numpy()
        dist = picks["distance"].to_numpy(np.float64)
        rank = picks["rank"].to_numpy(np.int64)
        order = np.argsort(row, kind="stable")  # picks of one image together, in pick order
        uniq, start, count = np.unique(row[order], return_index=True, return_counts=True)
        score = np.maximum.reduceat(dist[order], start)
        best = np.minimum.reduceat(rank[order], start)
        prio = np.lexsort((uniq, -score, best))  # best rank, then larger distance, then row
        if n is not None:
            prio = prio[:n]
        names = self.classes.names if self.classes is not None else None
        ids = picks["id"].to_numpy(dtype=object)
        comp = picks["competitor"].to_numpy(dtype=object)
        cls = picks["class_id"].to_numpy(np.int64)
        direc = picks["direction"].to_numpy(dtype=object)
        reasons, out_ids = [], []
        for u in prio:
            members = order[start[u]:start[u] + count[u]]
            out_ids.append(ids[members[0]])
            entries = []
            for j in members:
                k = int(cls[j])
                e = {"competitor": comp[j], "class": k, "by": direc[j], "d": round(float(dist[j]), 6),
                     "rank": int(rank[j])}
                if names is not None and 0 <= k < len(names):
                    e["class_name"] = names[k]
                entries.append(e)
            reasons.append(dumps_reason({"distance": kind, "target": target, "picks": entries}))
        return result_frame(out_ids, score[prio], reasons, n_picks=count[prio].astype(np.int64),
                            best_rank=best[prio].astype(np.int64))
