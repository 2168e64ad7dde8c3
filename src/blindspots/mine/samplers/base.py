"""The sampler interface shared by every selection strategy (MAD, entropy, surprise, random).

A sampler reads only the score table written by `blindspots.scan` (one row per image id;
see docs/architecture.md, "Core contracts") and never decodes an image again. Settings go in the
constructor (scikit-learn style); `select(table, n=None, *, seed=0)` returns a
`pandas.DataFrame` with one row per distinct image, in priority order, with at least:

- `id`: str, the image id (path relative to the pool root),
- `score`: float64, the strategy's score (higher = picked earlier by that strategy),
- `reason`: str, a short JSON document saying why the image was picked.

Rows whose `status` is not 'ok' (images that failed to decode or that a model failed on during
the scan) are never selected, and when the table has a `content_hash` column only the first row
(in table order) of each hash is: exact duplicate images are picked once. Column names are
spelled in `blindspots.scan.schema`: `frac__{M}__{k}` (pixel fraction of class k in model M's
argmax map), `entropy__{M}`, `maxprob__{M}`, `dpa__{T}__{G}` (1 - pixel agreement),
`dmiou__{T}__{G}` (1 - mIoU).
"""
from __future__ import annotations

import functools
import json
import warnings
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from blindspots._validation import check_int, check_seed
from blindspots.scan import schema

RESULT_COLUMNS = ("id", "score", "reason")


class Sampler(ABC):
    """Base class: a selection strategy over the score table.

    Subclasses implement `select`; the helpers below do the common validation. A sampler that ranks by one
    score per row also gives it as `score_samples(table) -> float64 [N]` in table order, higher picked first
    (scikit-learn's name for per-sample scores), and its `select` ranks the usable rows by it.
    """

    @abstractmethod
    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        """Pick images from `table`.

        table: the score table (one row per image id).
        n: at most this many images (None: the strategy's natural size, or all usable rows).
        seed: random seed; the same seed and table give the same picks.
        Returns a DataFrame with columns `id`, `score`, `reason` (+ strategy extras),
        one row per distinct image, in priority order, index 0..len-1.
        """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every strategy's `select` gets the common checks, so a new strategy cannot forget them:
        # the table's type, n and the seed are checked before it runs, and an empty pick list that
        # nobody asked for (n > 0) comes with a warning that names the reason.
        super().__init_subclass__(**kwargs)
        if "select" in cls.__dict__:
            cls.select = checked_select(cls.__dict__["select"])  # type: ignore[method-assign]

    def get_params(self) -> dict[str, Any]:
        """Constructor settings, for recording how a selection was made."""
        return {k: v for k, v in vars(self).items() if not k.endswith("_") and not k.startswith("_")}


def checked_select(select: Callable[..., pd.DataFrame]) -> Callable[..., pd.DataFrame]:
    """`select` with the common checks of every sampler (see `Sampler.__init_subclass__`)."""
    if getattr(select, "_common_checks", False):
        return select

    @functools.wraps(select)
    def wrapper(self: Sampler, table: pd.DataFrame, n: int | None = None, *, seed: int = 0,
                **kwargs: Any) -> pd.DataFrame:
        check_table(table, ())
        check_n(n)
        check_seed(seed)
        picks = select(self, table, n, seed=seed, **kwargs)
        if len(picks) == 0 and n != 0:
            warnings.warn(f"{type(self).__name__}: picked no image: {why_nothing(table)}", stacklevel=2)
        return picks

    wrapper._common_checks = True  # type: ignore[attr-defined]
    return wrapper


def why_nothing(table: pd.DataFrame) -> str:
    """Plain words for why a selection came back empty."""
    if len(table) == 0:
        return "the score table has no rows"
    if schema.STATUS in table.columns:
        ok = int((table[schema.STATUS] == schema.STATUS_OK).sum())
        if ok == 0:
            return (f"every one of its {len(table)} rows is an error row (status != 'ok': the image could not "
                    "be read or a model failed on it); see the table's `error` column")
    return ("no usable row had a finite score for this strategy (NaN settings such as class-size ranges, or "
            "score columns that are all NaN)")


def check_table(table: Any, required: Iterable[str], name: str = "table") -> pd.DataFrame:
    """Validate that `table` is a DataFrame with an `id` column and every `required` column."""
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"{name}: expected a pandas.DataFrame (the score table), got {type(table).__name__}")
    missing = [c for c in ("id", *required) if c not in table.columns]
    if missing:
        shown = list(table.columns[:12]) + (["..."] if len(table.columns) > 12 else [])
        raise ValueError(f"{name}: expected score-table columns {missing}, got columns {shown}")
    return table


def check_n(n: Any, name: str = "n") -> int | None:
    """n must be None or a non-negative int (the shared check, `_validation.check_int`)."""
    return check_int(n, name, minimum=0, allow_none=True)


def usable_mask(table: pd.DataFrame) -> np.ndarray:
    """bool [N]: rows that may be selected: status 'ok' (all rows if the table has no status),
    and, with a `content_hash` column, the first ok row of each hash (exact duplicates once;
    rows without a hash are kept)."""
    if schema.STATUS not in table.columns:
        ok = np.ones(len(table), dtype=bool)
    else:  # compare in pandas (vectorised for Arrow strings too), then one bool array out
        ok = (table[schema.STATUS] == schema.STATUS_OK).to_numpy(dtype=bool, na_value=False)
    if schema.CONTENT_HASH in table.columns:
        h = table[schema.CONTENT_HASH]
        dup = (h.duplicated(keep="first") & h.notna()).to_numpy(dtype=bool, na_value=False)
        if dup.any():
            # duplicates among ok rows only: a failed copy must not hide its ok twin
            ok_rows = np.flatnonzero(ok)
            h_ok = h.iloc[ok_rows]
            later = (h_ok.duplicated(keep="first") & h_ok.notna()).to_numpy(dtype=bool, na_value=False)
            ok = ok.copy()  # pandas may hand out a read-only view
            ok[ok_rows[later]] = False
    return ok


def column(table: pd.DataFrame, name: str, dtype: Any = np.float64) -> np.ndarray:
    """One numeric column as a numpy array (NaN for nulls), without a copy when it is already `dtype`."""
    col = table[name]
    if isinstance(col.dtype, np.dtype) and col.dtype.kind == "f":
        return col.to_numpy(dtype=dtype, copy=False)  # numpy floats: NaN already marks nulls
    return col.to_numpy(dtype=dtype, na_value=np.nan)


def ids_at(table: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """object [len(rows)]: the `id` of the given row positions (converts only those rows)."""
    return table["id"].iloc[np.asarray(rows, dtype=np.int64)].astype(str).to_numpy(dtype=object)


def frac_models(table: pd.DataFrame) -> dict[str, list[int]]:
    """Models with `frac__{M}__{k}` columns -> their sorted class ids."""
    return schema.frac_models(table.columns)


def distance_pairs(table: pd.DataFrame, kind: str) -> list[tuple[str, str]]:
    """(target, competitor) pairs with a `{kind}__{T}__{G}` column, in column order."""
    return schema.distance_pairs(table.columns, kind)


def infer_target(table: pd.DataFrame, kind: str = "dpa") -> str:
    """The target model: the one name on the left of every distance column."""
    targets = {t for t, _ in distance_pairs(table, kind)}
    if len(targets) != 1:
        raise ValueError(
            f"target: could not infer the target model from `{kind}__{{T}}__{{G}}` columns "
            f"(found targets {sorted(targets)}); pass target= explicitly"
        )
    return targets.pop()


def top_n_indices(values: np.ndarray, n: int, candidates: np.ndarray | None = None) -> np.ndarray:
    """Indices of the `n` largest finite values, sorted by value desc then index asc.

    Exact and deterministic under ties (ties at the cut keep the lowest indices), O(N) via
    argpartition, so it matches a brute-force stable sort.
    values: float [N]; candidates: int64 [M] indices into `values` to choose from (None: all).
    Returns int64 [min(n, #finite candidates)].
    """
    idx = np.arange(len(values)) if candidates is None else np.asarray(candidates, dtype=np.int64)
    v = values[idx]
    finite = np.isfinite(v)
    if not finite.all():
        idx, v = idx[finite], v[finite]
    if n <= 0 or len(idx) == 0:
        return np.empty(0, dtype=np.int64)
    if len(idx) > n:
        kth = np.partition(v, len(v) - n)[len(v) - n]  # n-th largest value
        above = v > kth
        need = n - int(above.sum())
        tied = np.flatnonzero(v == kth)[:need]  # idx is ascending, so lowest indices first
        keep = np.concatenate([np.flatnonzero(above), tied])
        idx, v = idx[keep], v[keep]
    order = np.lexsort((idx, -v))
    return idx[order].astype(np.int64)


def result_frame(ids: Sequence[str] | np.ndarray, scores: np.ndarray, reasons: Sequence[str],
                 **extra: Any) -> pd.DataFrame:
    """Assemble a selection result: columns id, score, reason, then `extra` columns."""
    df = pd.DataFrame({"id": np.asarray(ids, dtype=object), "score": np.asarray(scores, dtype=np.float64),
                       "reason": list(reasons)})
    for k, v in extra.items():
        df[k] = v
    return df.reset_index(drop=True)


def dumps_reason(obj: Any) -> str:
    """Compact, stable JSON for the `reason` column."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True)
