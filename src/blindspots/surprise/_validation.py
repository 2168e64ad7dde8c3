"""Input checks shared by the surprise estimators (public boundary validation)."""
from __future__ import annotations

import numpy as np


def check_traces(traces: np.ndarray, name: str = "traces", d: int | None = None) -> np.ndarray:
    """Validate activation traces: finite floats of shape [n, d] (n >= 1). Returns float32 or float64 as given."""
    arr = np.asarray(traces)
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array [n, d] of activation traces, got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name}: expected at least one trace, got n=0")
    if d is not None and arr.shape[1] != d:
        raise ValueError(f"{name}: expected {d} features per trace (as at fit), got {arr.shape[1]}")
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


def check_labels(labels: np.ndarray, n: int, name: str = "labels") -> np.ndarray:
    """Validate integer class ids int [n] (non-negative). Returns int64."""
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
