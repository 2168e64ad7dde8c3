"""Votes on images: class labels plus *none of the above*, majority labels, annotator agreement.

A vote table has one row per (item_id, annotator) with `label`: an int class id, or NONE (-1) for
*none of the above*; without an annotator column it is one voter's table. In a CSV a label may be a
class name (any case), a class id, or a *none* alias. An item's label is the majority of its votes;
if *none of the above* wins, the item is left unlabelled (the Defuse paper discards those labels).
Ties go to the lowest class id, and a class always beats *none* in a tie. Agreement of an item =
the fraction of its annotators who voted for its majority answer (Defuse ICLR Figure 6 / workshop
Figure 7).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

NONE = -1
NONE_NAMES = ("none", "none of the above", "none_of_the_above", "nota", "-1")
VOTE_COLUMNS = ("item_id", "annotator", "label")
#: The annotator of a vote table without an annotator column (or with it left blank).
ONE_VOTER = "voter"


def _names_hint(class_names: Sequence[str], limit: int = 20) -> str:
    """The allowed class names for an error message, shortened past `limit` names."""
    names = [str(n) for n in class_names]
    shown = ", ".join(repr(n) for n in names[:limit])
    return f"[{shown}{', ...' if len(names) > limit else ''}]"


def label_parser(class_names: Sequence[str]) -> Callable[[object], int]:
    """A function mapping a vote's label to a class id (or NONE).

    Accepts a class name (exact, else case-insensitive when that is unambiguous), a class id
    0..K-1, or a *none of the above* alias (NONE_NAMES). Anything else is a ValueError naming the
    value and the allowed names.
    """
    names = [str(n) for n in class_names]
    exact = {n: k for k, n in enumerate(names)}
    folded: dict[str, int] = {}
    for k, n in enumerate(names):
        # Why -2: two names that differ only in case cannot be matched case-insensitively.
        folded[n.casefold()] = -2 if n.casefold() in folded else k

    def parse(value: object) -> int:
        text = str(value).strip()
        if text.casefold() in NONE_NAMES:
            return NONE
        if text in exact:
            return exact[text]
        if folded.get(text.casefold(), -2) >= 0:
            return folded[text.casefold()]
        try:
            k = int(float(text))
        except (ValueError, OverflowError):
            k = None
        if k is not None and 0 <= k < len(names) and float(text) == k:
            return k
        raise ValueError(f"label: expected a class name from {_names_hint(names)}, a class id "
                         f"0..{len(names) - 1} or 'none', got {value!r}")

    return parse


def parse_label(value: object, class_names: Sequence[str]) -> int:
    """A vote's label as a class id (or NONE): a class name (any case), a class id, or 'none'."""
    return label_parser(class_names)(value)


def check_votes(votes: pd.DataFrame, num_classes: int) -> pd.DataFrame:
    """Validate a vote table (columns item_id, label, optional annotator) and return a clean copy.

    Without an `annotator` column (or with it blank) the votes are one voter's, named ONE_VOTER.
    """
    missing = [c for c in ("item_id", "label") if c not in votes.columns]
    if missing:
        raise ValueError(f"votes: expected columns {list(VOTE_COLUMNS)} (annotator optional), "
                         f"got {list(votes.columns)} (missing {missing})")
    votes = votes.copy()
    if "annotator" not in votes.columns:
        votes["annotator"] = ONE_VOTER
    out = votes.loc[:, list(VOTE_COLUMNS) + [c for c in votes.columns if c not in VOTE_COLUMNS]].copy()
    out["item_id"] = out["item_id"].astype(str).str.strip()
    out["annotator"] = out["annotator"].fillna("").astype(str).str.strip().replace("", ONE_VOTER)
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
        if first[1] == ONE_VOTER:
            raise ValueError(f"votes: without an annotator column each item_id may appear once (one voter), got "
                             f"{first[0]!r} more than once; add an annotator column for several voters")
        raise ValueError(f"votes: expected one vote per (item_id, annotator), got duplicates e.g. {first}")
    return out


def read_votes_csv(path: str | Path, class_names: Sequence[str]) -> pd.DataFrame:
    """Read a votes CSV: columns item_id, label (class name in any case, class id, or 'none') and an optional
    annotator (absent or blank: one voter). Blank labels are skipped; other columns are kept.

    Every problem is one ValueError naming the file (and the row for a bad label).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"votes: expected a votes CSV file, got {str(path)!r}")
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (ValueError, pd.errors.ParserError) as err:  # also UnicodeDecodeError, EmptyDataError
        raise ValueError(f"votes: cannot read {path.name} as a CSV with columns {list(VOTE_COLUMNS)} "
                         f"({' '.join(str(err).split())[:200]})") from None
    raw.columns = [str(c).strip() for c in raw.columns]
    missing = [c for c in ("item_id", "label") if c not in raw.columns]
    if missing:
        raise ValueError(f"votes: expected columns {list(VOTE_COLUMNS)} (annotator optional) in {path.name}, "
                         f"got {list(raw.columns)}")
    raw = raw[raw["label"].str.strip() != ""]
    parse = label_parser(class_names)
    rows = []
    for line, value in zip(raw.index, raw["label"]):
        try:
            rows.append(parse(value))
        except ValueError as err:
            raise ValueError(f"votes: row {line + 2} of {path.name}: {err}") from None
    out = raw.assign(label=np.array(rows, dtype=np.int64))
    try:
        return check_votes(out, len(class_names))
    except ValueError as err:
        raise ValueError(f"{path.name}: {err}") from None


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
