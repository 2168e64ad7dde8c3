"""Votes on images: class labels plus *none of the above*, majority labels, annotator agreement.

A vote table has one row per (item_id, annotator) with `label`: an int class id, or NONE (-1)
for *none of the above*. An item's label is the majority of its votes; if *none of the above*
wins, the item is left unlabelled (the Defuse paper discards those labels). Ties go to the lowest
class id, and a class always beats *none* in a tie. Agreement of an item = the fraction of its
annotators who voted for its majority answer (Defuse ICLR Figure 6 / workshop Figure 7).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

NONE = -1
NONE_NAMES = ("none", "none of the above", "none_of_the_above", "nota", "-1")
VOTE_COLUMNS = ("item_id", "annotator", "label")


def parse_label(value: object, class_names: Sequence[str]) -> int:
    """A vote's label as a class id (or NONE): accepts a class name, a class id, or 'none'."""
    text = str(value).strip()
    if text.lower() in NONE_NAMES:
        return NONE
    if text in class_names:
        return list(class_names).index(text)
    try:
        k = int(float(text))
    except ValueError:
        k = None
    if k is not None and 0 <= k < len(class_names) and float(text) == k:
        return k
    raise ValueError(f"label: expected a class name from {list(class_names)}, a class id "
                     f"0..{len(class_names) - 1} or 'none', got {value!r}")


def check_votes(votes: pd.DataFrame, num_classes: int) -> pd.DataFrame:
    """Validate a vote table (columns item_id, annotator, label) and return a clean copy."""
    missing = [c for c in VOTE_COLUMNS if c not in votes.columns]
    if missing:
        raise ValueError(f"votes: expected columns {list(VOTE_COLUMNS)}, got {list(votes.columns)} (missing {missing})")
    out = votes.loc[:, list(VOTE_COLUMNS) + [c for c in votes.columns if c not in VOTE_COLUMNS]].copy()
    out["item_id"] = out["item_id"].astype(str)
    out["annotator"] = out["annotator"].astype(str)
    labels = pd.to_numeric(out["label"], errors="coerce")
    if labels.isna().any() or (labels != labels.round()).any():
        raise ValueError("votes: expected integer labels (class ids or -1 for none of the above), got "
                         f"{out['label'][labels.isna()].head(3).tolist()}")
    labels = labels.astype(np.int64)
    bad = (labels < NONE) | (labels >= num_classes)
    if bad.any():
        raise ValueError(f"votes: expected labels in -1..{num_classes - 1}, got {sorted(labels[bad].unique())[:5]}")
    out["label"] = labels
    dup = out.duplicated(["item_id", "annotator"], keep=False)
    if dup.any():
        first = out.loc[dup, ["item_id", "annotator"]].iloc[0].tolist()
        raise ValueError(f"votes: expected one vote per (item_id, annotator), got duplicates e.g. {first}")
    return out


def read_votes_csv(path: str | Path, class_names: Sequence[str]) -> pd.DataFrame:
    """Read a CSV with columns item_id, annotator, label (class name, id, or 'none'); blank labels are skipped."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: expected a votes CSV file, got {str(path)!r}")
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in VOTE_COLUMNS if c not in raw.columns]
    if missing:
        raise ValueError(f"path: expected columns {list(VOTE_COLUMNS)} in {path.name}, got {list(raw.columns)}")
    raw = raw[raw["label"].str.strip() != ""]
    rows = []
    for i, r in enumerate(raw.itertuples(index=False)):
        try:
            rows.append(parse_label(r.label, class_names))
        except ValueError as err:
            raise ValueError(f"path: row {i + 2} of {path.name}: {err}") from None
    out = raw.assign(label=np.array(rows, dtype=np.int64))
    return check_votes(out, len(class_names))


def majority_vote(votes: pd.DataFrame, num_classes: int) -> pd.DataFrame:
    """Per item: label (int, NONE if *none* won), n_votes, n_majority, agreement (n_majority / n_votes).

    Returns one row per item_id, sorted by item_id.
    """
    votes = check_votes(votes, num_classes)
    if votes.empty:
        return pd.DataFrame({"item_id": pd.Series(dtype=str), "label": pd.Series(dtype=np.int64),
                             "n_votes": pd.Series(dtype=np.int64), "n_majority": pd.Series(dtype=np.int64),
                             "agreement": pd.Series(dtype=float)})
    counts = pd.crosstab(votes["item_id"], votes["label"])
    cols = np.array(counts.columns, dtype=np.int64)
    # Order columns so argmax's first-max rule breaks ties: classes by id, then NONE last.
    order = np.argsort(np.where(cols == NONE, num_classes, cols), kind="stable")
    mat = counts.to_numpy()[:, order]
    cols = cols[order]
    winner = mat.argmax(axis=1)
    n_major = mat[np.arange(len(mat)), winner]
    n_votes = mat.sum(axis=1)
    return pd.DataFrame({"item_id": counts.index.astype(str), "label": cols[winner].astype(np.int64),
                         "n_votes": n_votes.astype(np.int64), "n_majority": n_major.astype(np.int64),
                         "agreement": n_major / n_votes}).reset_index(drop=True)


def mean_and_se(values: np.ndarray) -> tuple[float, float, int]:
    """(mean, standard error of the mean, n); NaNs for empty input."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return float("nan"), float("nan"), 0
    se = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
    return float(v.mean()), se, int(len(v))


def agreement_table(items: pd.DataFrame, group: str = "in_failure_scenario") -> pd.DataFrame:
    """Annotator agreement (percent) by group, as in the workshop paper's Figure 7.

    items: one row per voted item with `agreement` (0..1) and a boolean `group` column.
    Rows: "Failure scenario", "Non-failure scenario", "Combined"; columns mean, se, n (percent).
    """
    for col in ("agreement", group):
        if col not in items.columns:
            raise ValueError(f"items: expected a column {col!r}, got {list(items.columns)}")
    rows = []
    mask = items[group].astype(bool).to_numpy()
    agree = items["agreement"].to_numpy(dtype=float) * 100
    for name, sel in (("Failure scenario", mask), ("Non-failure scenario", ~mask), ("Combined", np.ones_like(mask))):
        m, se, n = mean_and_se(agree[sel])
        rows.append({"group": name, "mean": m, "se": se, "n": n})
    return pd.DataFrame(rows).set_index("group")


def format_agreement_table(table: pd.DataFrame, dataset: str = "data") -> str:
    """Plain-text rendering: 'Dataset | Failure Scenario | Non-Failure Scenario | Combined' with mean ± se."""
    cells = [f"{r['mean']:.1f} ± {r['se']:.1f}" if np.isfinite(r["mean"]) else "-" for _, r in table.iterrows()]
    head = "Dataset | Failure Scenario | Non-Failure Scenario | Combined"
    return head + "\n" + " | ".join([dataset] + cells)
