"""A large photo through decode, the input policy and a binary model's output: the same bits as the
one-shot formulas, in a fraction of the memory (a 12 MP RGBA photo measured in a fresh process)."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from blindspots.data.sources import decode
from blindspots.models.adapters import inputs
from blindspots.models.adapters.inputs import InputPolicy, resize_images
from blindspots.models.adapters.outputs import to_probabilities

SRC = Path(__file__).resolve().parents[1] / "src"


def _blend_formula(rgba: np.ndarray) -> np.ndarray:
    alpha = rgba[..., 3:4].astype(np.uint16)
    rgb = rgba[..., :3].astype(np.uint16)
    return ((rgb * alpha + 255 * (255 - alpha) + 127) // 255).astype(np.uint8)


def test_alpha_blend_in_bands_is_the_formula_for_every_colour_and_alpha(monkeypatch) -> None:
    c, a = np.meshgrid(np.arange(256), np.arange(256))  # every (colour, alpha) pair, 256 rows
    rgba = np.stack([c, 255 - c, c // 2, a], axis=-1).astype(np.uint8)
    whole = decode._composite_over_white(rgba)
    monkeypatch.setattr(decode, "BLEND_ROWS_PIXELS", 256 * 7)  # bands of 7 rows: a short last band
    banded = decode._composite_over_white(rgba)
    assert whole.dtype == banded.dtype == np.uint8 and whole.shape == (256, 256, 3)
    assert np.array_equal(whole, _blend_formula(rgba)) and np.array_equal(banded, whole)
    # through a file: RGBA and LA (converted to RGBA first) both blend over white
    buf = io.BytesIO()
    Image.fromarray(rgba).save(buf, format="PNG")
    assert np.array_equal(decode.decode_image(buf.getvalue()), whole)


def test_resize_one_plane_at_a_time_has_the_bits_of_one_call(monkeypatch) -> None:
    rng = np.random.default_rng(0)
    batch = rng.integers(0, 256, (2, 203, 151, 3), dtype=np.uint8)
    for size in ((64, 50), (100, 170), (300, 170)):  # shrink (antialiased), mixed, enlarge (always one call)
        whole = resize_images(batch, size)
        monkeypatch.setattr(inputs, "RESIZE_FLOAT_BYTES", 0)
        planes = resize_images(batch, size)
        monkeypatch.undo()
        assert planes.shape == (2,) + size + (3,) and planes.dtype == np.uint8
        assert np.array_equal(planes, whole)


def test_bgr_policy_resizes_before_reversing_with_the_same_bits() -> None:
    rng = np.random.default_rng(1)
    batch = rng.integers(0, 256, (1, 250, 190, 3), dtype=np.uint8)
    got = InputPolicy(max_side=96, pad=32, channels="bgr").prepare(batch)
    reversed_first = InputPolicy(max_side=96, pad=32).prepare(np.ascontiguousarray(batch[..., ::-1]))
    assert got.shape == (1, 96, 96, 3) and got.flags.c_contiguous
    assert np.array_equal(got, reversed_first)


@pytest.mark.parametrize("output", ["logits", "probabilities"])
def test_binary_output_written_in_place_equals_one_minus_p_and_p(output: str) -> None:
    gen = torch.Generator().manual_seed(0)
    raw = torch.randn(3, 1, 17, 9, generator=gen) * 4 if output == "logits" else \
        torch.rand(3, 1, 17, 9, generator=gen) * (1 + 5e-7)  # a hair above 1: within tolerance, clamped
    p = torch.sigmoid(raw) if output == "logits" else raw.clamp(0, 1)
    expected = torch.cat([1 - p, p], dim=1).numpy()
    before = raw.clone()
    got = to_probabilities(raw, output, 2, "m")
    assert got.dtype == np.float32 and got.shape == (3, 2, 17, 9) and got.flags.c_contiguous
    assert np.array_equal(got, expected)
    assert torch.equal(raw, before)  # the model's own output is not changed in place
    with pytest.raises(ValueError, match=r"one-channel probabilities .*output='logits'"):
        to_probabilities(torch.full((1, 1, 2, 2), 1.5), "probabilities", 2, "m")


_PROBE = """
import io, json, sys
import numpy as np, torch
from PIL import Image
from blindspots.data.sources.decode import decode_image
from blindspots.models.adapters.inputs import InputPolicy
from blindspots.models.adapters.outputs import to_probabilities
torch.set_num_threads(1)
h, w = 3000, 4000
rgba = np.zeros((h, w, 4), np.uint8); rgba[::7, :, 3] = 255; rgba[:, ::5, 0] = 200
buf = io.BytesIO(); Image.fromarray(rgba).save(buf, format="PNG", compress_level=1); data = buf.getvalue()
del rgba, buf
policy = InputPolicy(max_side=960, pad=32, channels="bgr")
# warm up every path on a small image, so that the libraries' one-off allocations are not counted
small = io.BytesIO(); Image.fromarray(np.zeros((300, 400, 4), np.uint8)).save(small, format="PNG")
x = policy.prepare(decode_image(small.getvalue())[None])
to_probabilities(torch.rand(1, 1, *x.shape[1:3]), "probabilities", 2, "m")
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key))
def reset():  # the peak (VmHWM) starts again from the current RSS: each step is measured alone
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status("VmRSS:")
base = reset()
image = decode_image(data)[None]                     # kept: 36 MB
decode = status("VmHWM:") - base
base = reset()
x = policy.prepare(image)
prepare = status("VmHWM:") - base
score = torch.rand(1, 1, *x.shape[1:3])
base = reset()
proba = to_probabilities(policy.restore(score, (h, w)), "probabilities", 2, "m")   # kept: 96 MB
output = status("VmHWM:") - base
print(json.dumps({"decode": decode, "prepare": prepare, "output": output, "shape": list(proba.shape)}))
"""


def test_a_12_megapixel_rgba_photo_costs_little_beyond_its_arrays() -> None:
    """Peak RSS of each step in a fresh process (glibc's default allocator: large arrays are returned
    on free; the peak reset between steps) above what the step keeps: the image (36 MB), nothing, its
    two-class probabilities (96 MB). Blending the whole photo at once, converting all of it to float
    for the resize and `torch.cat([1 - p, p])` took far more (printed by the assertion)."""
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux's /proc/self/clear_refs to measure each step's peak memory")
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("BLINDSPOTS_MALLOC", None)
    res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["shape"] == [1, 2, 3000, 4000]
    kept_image, kept_proba = 36, 96
    # decode: the PIL image and its array (48 MB each) live beside the result for a moment
    assert got["decode"] < kept_image + 150, got
    # prepare: one float plane (48 MB) at a time, not the 144 MB float copy of the whole photo
    assert got["prepare"] < 110, got
    # output: the restored score plane (48 MB) beside the result, not p, clamp(p), 1 - p and the cat
    assert got["output"] < kept_proba + 90, got
