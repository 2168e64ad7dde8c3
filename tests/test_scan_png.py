"""The scan's own PNG encoder: Pillow reads back exactly what was written."""
from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from PIL import Image

from blindspots.scan.png import encode_index_png


def _read(data: bytes) -> tuple[np.ndarray, str]:
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return np.asarray(im), im.mode


@settings(max_examples=60)
@given(arrays(np.uint8, st.tuples(st.integers(1, 40), st.integers(1, 40))), st.integers(0, 9))
def test_uint8_round_trip(m: np.ndarray, level: int) -> None:
    out, mode = _read(encode_index_png(m, level=level))
    assert mode == "L"
    np.testing.assert_array_equal(out, m)


@settings(max_examples=40)
@given(arrays(np.uint16, st.tuples(st.integers(1, 30), st.integers(1, 30))))
def test_uint16_round_trip(m: np.ndarray) -> None:
    out, _ = _read(encode_index_png(m))
    np.testing.assert_array_equal(out.astype(np.uint16), m)


def test_label_map_not_larger_than_pillow() -> None:
    yy, xx = np.mgrid[:128, :128]
    m = ((yy // 20 + xx // 33) % 8).astype(np.uint8)  # blocky, like a segmentation map
    buf = io.BytesIO()
    Image.fromarray(m).save(buf, format="PNG", compress_level=1)
    assert len(encode_index_png(m)) <= 2 * len(buf.getvalue())


@pytest.mark.parametrize("bad, msg", [(np.zeros((4, 4), np.int32), "dtype"), (np.zeros((2, 3, 3), np.uint8), "2-D"),
                                      (np.zeros((0, 5), np.uint8), "2-D")])
def test_bad_input(bad: np.ndarray, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        encode_index_png(bad)
