"""The shared argument checks: every public function validates with these, so one bad input gets one
message everywhere: "<argument>: expected <what>, got <value>" (a ValueError).

Scalars: `check_int` (positive ints, counts, seeds), `check_seed`, `check_number` (positive / in a
range, e.g. probabilities). Arrays: `check_label_map` (integer class-id maps), `check_same_shape`,
`check_class_ids` (ids in 0..C-1 or the ignore index), `check_ignore_index`, `check_traces` (finite
float rows [n, d]), `check_labels` (one class id per row).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "check_class_ids",
    "check_ignore_index",
    "check_max_pixels",
    "check_int",
    "check_label_map",
    "check_labels",
    "check_number",
    "check_same_shape",
    "check_seed",
    "check_traces",
]


# --- scalars -----------------------------------------------------------------------------------

def _is_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, np.integer))


def check_int(value: Any, name: str, *, minimum: int = 1, allow_none: bool = False) -> int | None:
    """An integer >= `minimum` (default 1: "a positive integer"); None passes when `allow_none`."""
    if value is None and allow_none:
        return None
    if not _is_int(value) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name}: expected {'None or ' if allow_none else ''}{what}, got {value!r}")
    return int(value)


def check_seed(seed: Any, name: str = "seed") -> int:
    """A random seed: an integer >= 0 (numpy's SeedSequence refuses negative ones)."""
    return check_int(seed, name, minimum=0)  # type: ignore[return-value]


def check_max_pixels(max_pixels: Any, name: str = "max_pixels", *, allow_none: bool = False) -> int | None:
    """A pixel budget: an integer >= 1 (None passes when `allow_none`: no budget)."""
    return check_int(max_pixels, name, minimum=1, allow_none=allow_none)


def check_number(value: Any, name: str, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False) -> float:
    """A finite real number in [low, high] (open ends with low_open / high_open; None: unbounded).
    E.g. a probability: `check_number(p, "p", low=0, high=1)`; a rate: `check_number(lr, "lr", low=0, low_open=True)`."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
        and math.isfinite(float(value))
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        if low is not None and high is not None:
            what = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        elif low is not None:
            what = f"a number {'>' if low_open else '>='} {low:g}"
        elif high is not None:
            what = f"a number {'<' if high_open else '<='} {high:g}"
        else:
            what = "a finite number"
        raise ValueError(f"{name}: expected {what}, got {value!r}")
    return float(value)


# --- label maps and class ids ------------------------------------------------------------------

def check_ignore_index(ignore_index: Any, num_classes: int | None = None, *, negative: bool = True) -> int | None:
    """None, or an integer outside the class ids 0..C-1 (255 by default in the APIs; C = num_classes when
    known). negative=False: also >= 0, for a value compared with mask pixels, which are never negative
    (a negative ignore_index would ignore nothing)."""
    if ignore_index is None:
        return None
    if not _is_int(ignore_index):
        raise ValueError(f"ignore_index: expected an integer or None, got {ignore_index!r}")
    if ignore_index < 0 and not negative:
        raise ValueError(f"ignore_index: expected a non-negative mask value outside the class ids (255 by "
                         f"default) or None, got {ignore_index}")
    if num_classes is not None and 0 <= ignore_index < num_classes:
        raise ValueError(
            f"ignore_index: expected a value outside the class ids 0..{num_classes - 1} (or None), "
            f"got {ignore_index}"
        )
    return int(ignore_index)


def check_label_map(arr: Any, name: str, min_ndim: int = 2) -> np.ndarray:
    """An integer (not bool) array of class ids with at least `min_ndim` dimensions ([..., H, W])."""
    arr = np.asarray(arr)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name}: expected an integer label map (class ids), got dtype {arr.dtype}")
    if arr.ndim < min_ndim:
        raise ValueError(f"{name}: expected at least {min_ndim} dimensions ([..., H, W]), got shape {arr.shape}")
    return arr


def check_same_shape(a: np.ndarray, b: np.ndarray, names: tuple[str, str]) -> None:
    """`a` (named names[0]) must have the shape of `b` (names[1])."""
    if a.shape != b.shape:
        raise ValueError(f"{names[0]}: expected the shape of {names[1]} {b.shape}, got {a.shape}")


def check_class_ids(values: np.ndarray, name: str, num_classes: int, allowed: int | None = None) -> None:
    """Class ids must be in 0..C-1 (or equal `allowed`, the ignore index)."""
    if values.size == 0:
        return
    lo, hi = values.min(), values.max()
    if lo >= 0 and hi < num_classes:
        return
    bad = (values < 0) | (values >= num_classes)
    if allowed is not None:
        bad &= values != allowed
    if bad.any():
        examples = np.unique(values[bad])[:5].tolist()
        extra = f" or {allowed} (ignore_index)" if allowed is not None else ""
        raise ValueError(
            f"{name}: expected class ids in 0..{num_classes - 1}{extra}, got values {examples}"
        )


# --- feature rows (activation traces, latent codes) --------------------------------------------

def check_traces(traces: Any, name: str = "traces", d: int | None = None) -> np.ndarray:
    """Finite floats of shape [n, d] (n >= 1), e.g. activation traces. Returns float32 or float64 as given."""
    arr = np.asarray(traces)
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array [n, d] of activation traces, got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name}: expected at least one trace, got n=0")
    if arr.shape[1] == 0:
        raise ValueError(f"{name}: expected at least one feature per trace, got d=0 (shape {arr.shape})")
    if d is not None and arr.shape[1] != d:
        raise ValueError(f"{name}: expected {d} features per trace (as at fit), got {arr.shape[1]}")
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise ValueError(f"{name}: expected numeric activation traces, got dtype {arr.dtype}")
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    # cheap screen first: a NaN/inf entry makes the total NaN/inf; only then (or on overflow of huge
    # finite values) pay for the element-wise check, which builds an [n, d] mask
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.add.reduce(arr, axis=None)):
            return arr
    bad = ~np.isfinite(arr)
    if bad.any():
        rows = int(bad.any(axis=1).sum())
        raise ValueError(
            f"{name}: expected finite values, got {int(bad.sum())} NaN/inf entries in {rows} traces; "
            "drop or impute those traces first"
        )
    return arr


def check_labels(labels: Any, n: int, name: str = "labels") -> np.ndarray:
    """Integer class ids int [n] (non-negative; whole floats accepted). Returns int64."""
    arr = np.asarray(labels)
    if arr.ndim == 0:
        arr = np.full(n, int(arr), dtype=np.int64)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name}: expected an integer array of shape [{n}], got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name}: expected integer class ids, got dtype {arr.dtype}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name}: expected non-negative class ids, got minimum {int(arr.min())}")
    return arr.astype(np.int64, copy=False)
