"""The shared argument checks (_validation.py): one message shape, "<name>: expected <what>, got <value>"."""
from __future__ import annotations

import numpy as np
import pytest

from blindspots._validation import (
    check_class_ids, check_ignore_index, check_int, check_label_map, check_number, check_seed,
)


def test_ints_and_seeds() -> None:
    assert check_int(np.int64(3), "n") == 3 and type(check_int(np.int64(3), "n")) is int
    assert check_int(None, "n", allow_none=True) is None
    for bad in (0, True, 2.0, "2", None):
        with pytest.raises(ValueError, match="n: expected a positive integer"):
            check_int(bad, "n")
    with pytest.raises(ValueError, match=r"k: expected None or an integer >= 0, got -1"):
        check_int(-1, "k", minimum=0, allow_none=True)
    assert check_seed(0) == 0
    with pytest.raises(ValueError, match="seed: expected an integer >= 0"):
        check_seed(-1)


def test_numbers() -> None:
    assert check_number(0.5, "p", low=0, high=1) == 0.5
    with pytest.raises(ValueError, match=r"p: expected a number in \[0, 1\], got 1.5"):
        check_number(1.5, "p", low=0, high=1)
    with pytest.raises(ValueError, match=r"m: expected a number in \[0, 1\)"):
        check_number(1, "m", low=0, high=1, high_open=True)
    with pytest.raises(ValueError, match="lr: expected a number > 0"):
        check_number(0, "lr", low=0, low_open=True)
    with pytest.raises(ValueError, match="x: expected a finite number"):
        check_number(float("nan"), "x")


def test_label_maps_and_class_ids() -> None:
    with pytest.raises(ValueError, match="pred: .*integer"):
        check_label_map(np.zeros((2, 2)), "pred")
    with pytest.raises(ValueError, match="ignore_index"):
        check_ignore_index(1, 3)
    check_class_ids(np.array([0, 2, 255]), "t", 3, allowed=255)
    with pytest.raises(ValueError, match=r"t: expected class ids in 0..2 or 255 \(ignore_index\), got values \[7\]"):
        check_class_ids(np.array([0, 7, 255]), "t", 3, allowed=255)
