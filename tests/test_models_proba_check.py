"""`check_probabilities`' compiled one-pass check (large outputs) accepts and rejects exactly what
numpy's passes do, with the same messages."""
from __future__ import annotations

import numpy as np
import pytest

from blindspots.models import protocol


def _outcome(arr: np.ndarray) -> str:
    try:
        out = protocol.check_probabilities(arr, expected_shape=arr.shape, name="m")
    except ValueError as exc:
        return f"error: {exc}"
    assert out.dtype == np.float32 and out.shape == arr.shape
    return "ok"


def _cases() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    good = rng.random((2, 5, 97, 141), dtype=np.float32)
    good /= good.sum(axis=1, keepdims=True)
    cases = [good, good.astype(np.float64)]
    for change in ("nan", "inf", "neg", "big", "off", "slightly_off", "huge"):
        x = good.copy()
        if change == "nan":
            x[1, 2, 50, 60] = np.nan
        elif change == "inf":
            x[0, 0, 3, 4] = np.inf
        elif change == "neg":
            x[1, 4, 96, 140] = -0.2
        elif change == "big":
            x[0, 3, 0, 0] = 1.7
        elif change == "off":
            x[:, 0] *= 1.01
        elif change == "slightly_off":
            x[0, 1, 10, 10] += 5e-4  # within the tolerance
        else:  # finite values whose sum overflows
            x[0, :, 1, 1] = 3e38
        cases.append(x)
    return cases


@pytest.mark.parametrize("i", range(9))
def test_compiled_check_equals_numpy(i: int, monkeypatch: pytest.MonkeyPatch) -> None:
    arr = _cases()[i]
    assert arr.size >= protocol.COMPILED_CHECK_MIN
    compiled = _outcome(arr)
    monkeypatch.setattr(protocol, "COMPILED_CHECK_MIN", 1 << 62)
    assert compiled == _outcome(arr)


def test_compiled_sums_equal_numpy() -> None:
    from blindspots.models._proba_kernels import sums_range

    rng = np.random.default_rng(1)
    for c in (1, 2, 8, 19):
        x = (rng.random((3, c, 33, 70), dtype=np.float32) * 2 / c).astype(np.float32)
        finite, lo, hi, worst = sums_range(x.reshape(3, c, -1))
        assert finite and lo == float(x.min()) and hi == float(x.max())
        assert worst == float(np.abs(x.sum(axis=1) - 1).max())
