"""MRI acquisition differences applied to a slice: head pose, bias field, Rician noise, contrast."""
from __future__ import annotations

import numpy as np
import pytest

from blindspots.data.mri_conditions import bias_field, field_of_view, gamma_contrast, head_pose, rician_noise


def test_head_pose_rotates_and_shifts_image_and_mask_alike():
    rng = np.random.default_rng(0)
    img = rng.random((21, 21)).astype(np.float32)
    mask = (rng.random((21, 21)) * 4).astype(np.uint8)
    same, same_m = head_pose(img, mask, 0.0)
    assert np.allclose(same, img, atol=1e-6) and np.array_equal(same_m, mask)
    rot, rot_m = head_pose(img, mask, 90.0)
    # a quarter turn of a square about its centre is an exact permutation of pixels
    assert np.allclose(rot, np.rot90(img), atol=1e-5) or np.allclose(rot, np.rot90(img, -1), atol=1e-5)
    assert np.array_equal(rot_m, np.rot90(mask)) or np.array_equal(rot_m, np.rot90(mask, -1))
    moved, moved_m = head_pose(img, mask, 0.0, (2, 0))
    assert np.allclose(moved[2:], img[:-2], atol=1e-6) and np.all(moved[:2] == 0) and np.all(moved_m[:2] == 0)
    with pytest.raises(ValueError, match="mask"):
        head_pose(img, mask[:5], 10.0)
    with pytest.raises(ValueError, match="img"):
        head_pose(mask, mask, 10.0)


def test_field_of_view_shrinks_the_head_about_the_centre():
    img = np.zeros((41, 41), np.float32)
    img[10:31, 10:31] = 1.0  # a 21-pixel square about the centre
    mask = (img > 0).astype(np.uint8) * 3
    out, out_m = field_of_view(img, mask, 0.5)
    assert out_m.sum() / 3 == pytest.approx(11 * 11, abs=12) and set(np.unique(out_m)) == {0, 3}
    rows = np.flatnonzero(out_m.any(axis=1))
    assert rows[0] + rows[-1] == 40  # still centred
    same, same_m = field_of_view(img, mask, 1.0)
    assert np.allclose(same, img) and np.array_equal(same_m, mask)
    with pytest.raises(ValueError, match="scale"):
        field_of_view(img, mask, 0.0)


def test_bias_field_is_smooth_and_bounded_by_its_strength():
    f = bias_field((64, 64), 0.5, np.random.default_rng(1))
    assert f.shape == (64, 64) and f.dtype == np.float32
    assert f.min() >= 1 / 1.5 - 1e-5 and f.max() <= 1.5 + 1e-5
    assert max(f.max(), 1 / f.min()) == pytest.approx(1.5, rel=1e-4)  # the strength is reached
    assert np.abs(np.diff(np.log(f), axis=0)).max() < 0.05  # smooth: no jump between neighbours
    assert np.allclose(bias_field((8, 8), 0.0, np.random.default_rng(1)), 1.0)
    with pytest.raises(ValueError, match="strength"):
        bias_field((8, 8), -0.1, np.random.default_rng(1))


def test_rician_noise_follows_the_rice_distribution():
    rng = np.random.default_rng(2)
    dark = rician_noise(np.zeros((200, 200), np.float32), 0.05, rng)
    # no signal: the magnitude of complex Gaussian noise is Rayleigh, mean sigma * sqrt(pi / 2)
    assert dark.mean() == pytest.approx(0.05 * np.sqrt(np.pi / 2), rel=0.02)
    bright = rician_noise(np.full((200, 200), 0.5, np.float32), 0.05, rng)
    # strong signal: nearly Gaussian around sqrt(A^2 + sigma^2)
    assert bright.mean() == pytest.approx(np.sqrt(0.25 + 0.05 ** 2), rel=0.01)
    assert bright.std() == pytest.approx(0.05, rel=0.05)
    with pytest.raises(ValueError, match="sigma"):
        rician_noise(dark, -1.0, rng)


def test_gamma_contrast_is_monotone_and_keeps_the_ends():
    x = np.linspace(0, 1, 11, dtype=np.float32)[None, :]
    for g in (0.5, 2.0):
        y = gamma_contrast(x, g)
        assert np.all(np.diff(y) > 0) and y[0, 0] == 0 and y[0, -1] == 1
    assert np.all(gamma_contrast(x, 0.5)[0, 1:-1] > x[0, 1:-1])
    with pytest.raises(ValueError, match="gamma"):
        gamma_contrast(x, 0.0)
