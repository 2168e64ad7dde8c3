"""Weak labels: absolute category ratings (ACR) of the target's prediction, mean opinion
scores, the worst-n4 set S and rater agreement (paper Section 3.1 "Constructing S", 4.1).

Each rater gives each candidate image an integer 1..5 ("bad", "poor", "fair", "good",
"excellent") for the quality of the target's segmentation, or the answer out-of-domain
("ood"). Out-of-domain counts as +infinity: one rater's flag removes the image from S (the
paper's rule). MOS is the mean over the raters who rated the image.

Public API (stable):
- `OUT_OF_DOMAIN = "ood"`, `ACR_LABELS` (1..5 -> name).
- `Ratings(records=None)`: `.add(image_id, rater, score)`, `.frame` (DataFrame
  `image_id, rater, score` with score float64 1..5 or +inf for ood), `.matrix()`
  (images x raters, NaN where missing), `.mos(min_raters=1)`, `.out_of_domain()`,
  `.select_worst(n4=100, candidates=None, min_raters=1)`, `.agreement()`,
  `.to_csv(path)`, `Ratings.from_csv(path)`, `Ratings.from_frame(df)`.
- `krippendorff_alpha(matrix, level="ordinal")` (raters x items, NaN = missing).
- CSV format: header `image_id,rater,score`; score is 1..5 or `ood` (also `out-of-domain`,
  `inf`); an optional `timestamp` column is kept. One rating per (image, rater): the last
  one wins when `add` is called again; a CSV with duplicates is an error.

Agreement statistics (well known, all ignoring out-of-domain answers):
- mean pairwise Spearman rho and Kendall tau-b between raters, over co-rated images;
- Krippendorff's alpha, ordinal (the ACR scale's level) and interval metrics; it handles
  missing ratings and any number of raters (Krippendorff 2011, "Computing Krippendorff's
  alpha-reliability");
- for out-of-domain flags: the share of flagged images flagged by every rater who saw them.
"""
from __future__ import annotations

import csv
import io
import itertools
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
from scipy.stats import kendalltau, spearmanr

# ACR_LABELS and OUT_OF_DOMAIN are part of this module's public API (see above); the rule lives in scores.py
from blindspots.human.scores import ACR_LABELS, OUT_OF_DOMAIN, format_score, parse_score  # noqa: F401

COLUMNS = ("image_id", "rater", "score")


class Ratings:
    """A set of ACR ratings, at most one per (image, rater).

    records: optional iterable of (image_id, rater, score) tuples.
    """

    def __init__(self, records: Iterable[tuple[str, str, Any]] | None = None) -> None:
        self._data: dict[tuple[str, str], float] = {}
        self._extra: dict[tuple[str, str], dict[str, str]] = {}
        for i, rec in enumerate(records or ()):
            if len(rec) != 3:
                raise ValueError(f"records: expected (image_id, rater, score) tuples, got {rec!r} at position {i}")
            self.add(*rec)

    def add(self, image_id: str, rater: str, score: Any, **extra: str) -> None:
        """Record (or replace) one rater's answer for one image. score: 1..5 or 'ood'."""
        if not isinstance(image_id, str) or not image_id:
            raise ValueError(f"image_id: expected a non-empty string, got {image_id!r}")
        if not isinstance(rater, str) or not rater:
            raise ValueError(f"rater: expected a non-empty string, got {rater!r}")
        self._data[(image_id, rater)] = parse_score(score)
        if extra:
            self._extra[(image_id, rater)] = {k: str(v) for k, v in extra.items()}

    def __len__(self) -> int:
        return len(self._data)

    @property
    def frame(self) -> pd.DataFrame:
        """Long form: image_id (str), rater (str), score (float64: 1..5, +inf = out-of-domain)."""
        keys = list(self._data)
        return pd.DataFrame({"image_id": [k[0] for k in keys], "rater": [k[1] for k in keys],
                             "score": np.fromiter(self._data.values(), dtype=np.float64, count=len(keys))})

    @property
    def raters(self) -> list[str]:
        return sorted({r for _, r in self._data})

    @property
    def image_ids(self) -> list[str]:
        return list(dict.fromkeys(i for i, _ in self._data))

    def matrix(self) -> pd.DataFrame:
        """Images x raters, float64 (1..5, +inf = out-of-domain, NaN = not rated)."""
        df = self.frame
        if df.empty:
            return pd.DataFrame(dtype=np.float64)
        m = df.pivot(index="image_id", columns="rater", values="score")
        return m.reindex(index=self.image_ids, columns=self.raters)

    def out_of_domain(self) -> set[str]:
        """Images that at least one rater flagged out-of-domain."""
        return {i for (i, _), s in self._data.items() if math.isinf(s)}

    def mos(self, min_raters: int = 1) -> pd.Series:
        """Mean opinion score per image (float64, +inf if any rater said out-of-domain,
        NaN if fewer than `min_raters` answers). Index: image_id, in first-rated order."""
        m = self.matrix()
        if m.empty:
            return pd.Series(dtype=np.float64, name="mos")
        count = m.notna().sum(axis=1)
        out = m.mean(axis=1, skipna=True)  # any +inf makes the mean +inf: one rater excludes
        out[count < min_raters] = np.nan
        out.name = "mos"
        return out

    def select_worst(self, n4: int = 100, *, candidates: Sequence[str] | None = None,
                     min_raters: int = 1) -> pd.DataFrame:
        """S: the n4 images with the lowest MOS (paper default n4 = 100).

        Out-of-domain images (MOS +inf) and images with fewer than `min_raters` answers are
        never chosen. Ties keep the order of `candidates` (M's priority order) if given,
        else the order images were first rated.
        Returns DataFrame [image_id, mos, n_ratings] in selection order.
        """
        if isinstance(n4, bool) or not isinstance(n4, (int, np.integer)) or n4 < 0:
            raise ValueError(f"n4: expected an integer >= 0, got {n4!r}")
        if isinstance(min_raters, bool) or not isinstance(min_raters, (int, np.integer)) or min_raters < 1:
            raise ValueError(f"min_raters: expected an integer >= 1, got {min_raters!r}")
        mos = self.mos(min_raters)
        counts = self.matrix().notna().sum(axis=1) if len(mos) else pd.Series(dtype=np.int64)
        order = list(mos.index)
        if candidates is not None:
            cand = list(dict.fromkeys(str(c) for c in candidates))
            unknown = [i for i in order if i not in set(cand)]
            if unknown:
                raise ValueError(f"candidates: expected every rated image among the candidates, got "
                                 f"{len(unknown)} rated images outside them (e.g. {unknown[:3]})")
            order = [c for c in cand if c in mos.index]
        ok = [i for i in order if np.isfinite(mos[i])]
        pos = {i: p for p, i in enumerate(ok)}
        chosen = sorted(ok, key=lambda i: (mos[i], pos[i]))[:n4]
        return pd.DataFrame({"image_id": pd.Series(chosen, dtype=object),
                             "mos": np.asarray([mos[i] for i in chosen], dtype=np.float64),
                             "n_ratings": np.asarray([int(counts[i]) for i in chosen], dtype=np.int64)})

    def agreement(self) -> dict[str, float]:
        """Inter-rater agreement (out-of-domain answers left out); see the module docstring.

        Keys: n_images, n_raters, spearman_mean, kendall_mean (NaN if no rater pair shares
        >= 3 images with varying scores), alpha_ordinal, alpha_interval, ood_flagged,
        ood_unanimous_share.
        """
        m = self.matrix()
        out: dict[str, float] = {"n_images": float(len(m)), "n_raters": float(m.shape[1] if len(m) else 0)}
        finite = m.where(np.isfinite(m)) if len(m) else m
        rhos, taus = [], []
        for a, b in itertools.combinations(list(finite.columns), 2):
            both = finite[[a, b]].dropna()
            if len(both) >= 3 and both[a].nunique() > 1 and both[b].nunique() > 1:
                rhos.append(spearmanr(both[a], both[b]).statistic)
                taus.append(kendalltau(both[a], both[b]).statistic)
        out["spearman_mean"] = float(np.mean(rhos)) if rhos else float("nan")
        out["kendall_mean"] = float(np.mean(taus)) if taus else float("nan")
        arr = finite.to_numpy(dtype=np.float64).T if len(m) else np.empty((0, 0))
        out["alpha_ordinal"] = krippendorff_alpha(arr, level="ordinal") if arr.size else float("nan")
        out["alpha_interval"] = krippendorff_alpha(arr, level="interval") if arr.size else float("nan")
        flagged = np.isinf(m.to_numpy(dtype=np.float64)) if len(m) else np.zeros((0, 0), bool)
        any_flag = flagged.any(axis=1) if flagged.size else np.zeros(0, bool)
        seen = m.notna().to_numpy() if len(m) else np.zeros((0, 0), bool)
        unanimous = (flagged == seen).all(axis=1) & any_flag if flagged.size else np.zeros(0, bool)
        out["ood_flagged"] = float(any_flag.sum())
        out["ood_unanimous_share"] = float(unanimous.sum() / any_flag.sum()) if any_flag.any() else float("nan")
        return out

    # -- CSV ----------------------------------------------------------------------------

    def to_csv(self, path: str | Path | io.TextIOBase) -> None:
        """Write `image_id,rater,score[,extra...]` rows (score 1..5 or 'ood')."""
        extra_cols = sorted({k for e in self._extra.values() for k in e})
        own = not hasattr(path, "write")
        fh = open(path, "w", newline="", encoding="utf-8") if own else path
        try:
            w = csv.writer(fh)
            w.writerow([*COLUMNS, *extra_cols])
            for (i, r), s in self._data.items():
                e = self._extra.get((i, r), {})
                w.writerow([i, r, format_score(s), *[e.get(c, "") for c in extra_cols]])
        finally:
            if own:
                fh.close()

    @classmethod
    def from_csv(cls, path: str | Path | io.TextIOBase) -> "Ratings":
        """Read a ratings CSV; errors name the file line, column and the bad value."""
        own = not hasattr(path, "read")
        fh = open(path, newline="", encoding="utf-8-sig") if own else path
        try:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in (reader.fieldnames or [])]
            missing = [c for c in COLUMNS if c not in header]
            if missing:
                raise ValueError(f"path: expected CSV columns {list(COLUMNS)}, got header {header} (missing {missing})")
            reader.fieldnames = header
            out = cls()
            seen: dict[tuple[str, str], int] = {}
            for row in reader:
                line = reader.line_num
                if None in row:
                    raise ValueError(f"path: line {line}: expected {len(header)} fields, got more")
                image_id, rater = (row.get("image_id") or "").strip(), (row.get("rater") or "").strip()
                if not image_id:
                    raise ValueError(f"image_id: line {line}: expected a non-empty image id, got {row.get('image_id')!r}")
                if not rater:
                    raise ValueError(f"rater: line {line}: expected a non-empty rater name, got {row.get('rater')!r}")
                if (image_id, rater) in seen:
                    raise ValueError(f"path: line {line}: expected one rating per (image_id, rater), got a second "
                                     f"rating of {image_id!r} by {rater!r} (first on line {seen[(image_id, rater)]})")
                seen[(image_id, rater)] = line
                score = parse_score(row.get("score"), where=f"score: line {line}")
                extra = {k: v for k, v in row.items() if k not in COLUMNS and v not in (None, "")}
                out.add(image_id, rater, score, **extra)
            return out
        finally:
            if own:
                fh.close()

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> "Ratings":
        """From a DataFrame with columns image_id, rater, score."""
        missing = [c for c in COLUMNS if c not in df.columns]
        if missing:
            raise ValueError(f"df: expected columns {list(COLUMNS)}, got {list(df.columns)}")
        return cls(zip(df["image_id"].astype(str), df["rater"].astype(str), df["score"]))


def krippendorff_alpha(matrix: np.ndarray, level: str = "ordinal") -> float:
    """Krippendorff's alpha for a raters x items matrix (float, NaN = missing).

    level: "nominal", "ordinal" (ranks by the observed value frequencies) or "interval".
    Items with fewer than 2 ratings are not pairable and are left out. NaN if there is no
    disagreement to expect (a single observed value) or nothing pairable.
    """
    if level not in ("nominal", "ordinal", "interval"):
        raise ValueError(f"level: expected 'nominal', 'ordinal' or 'interval', got {level!r}")
    data = np.asarray(matrix, dtype=np.float64)
    if data.ndim != 2:
        raise ValueError(f"matrix: expected a 2-D raters x items array, got shape {data.shape}")
    values = np.unique(data[np.isfinite(data)])
    if len(values) < 2:
        return float("nan")
    index = {v: i for i, v in enumerate(values)}
    v = len(values)
    coincidence = np.zeros((v, v))
    for col in data.T:
        obs = col[np.isfinite(col)]
        m = len(obs)
        if m < 2:
            continue
        counts = np.zeros(v)
        for x in obs:
            counts[index[x]] += 1
        pair = np.outer(counts, counts) - np.diag(counts)
        coincidence += pair / (m - 1)
    n_c = coincidence.sum(axis=1)
    n = n_c.sum()
    if n <= 1:
        return float("nan")
    if level == "nominal":
        delta = 1.0 - np.eye(v)
    elif level == "interval":
        delta = (values[:, None] - values[None, :]) ** 2
    else:
        cum = np.cumsum(n_c)
        # sum_{g=c..k} n_g - (n_c + n_k) / 2, squared
        lo = np.minimum.outer(np.arange(v), np.arange(v))
        hi = np.maximum.outer(np.arange(v), np.arange(v))
        between = cum[hi] - np.where(lo > 0, cum[lo - 1], 0.0)
        delta = (between - (n_c[:, None] + n_c[None, :]) / 2.0) ** 2
    d_o = (coincidence * delta).sum()
    d_e = (np.outer(n_c, n_c) * delta).sum()
    if d_e == 0:
        return float("nan")
    return float(1.0 - (n - 1) * d_o / d_e)
