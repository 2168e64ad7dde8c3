"""Acquisition differences of MRI applied to a slice: head pose, field of view, intensity non-uniformity
(bias field), Rician noise and a change of contrast.

Each acts on a slice image float [H, W] in [0, 1] (and, for the pose, its mask uint8 [H, W]), seeded by a
numpy Generator, so a benchmark can turn them into conditions of a pool or a test set:

- `head_pose`: the head rotated in-plane and shifted, as it lies differently in the scanner;
- `field_of_view`: the same matrix over a wider field of view (coarser pixels, a smaller head);
- `bias_field`: a smooth multiplicative field (RF coil inhomogeneity), the artefact N4 (Tustison et al.
  2010, "N4ITK: Improved N3 Bias Correction") removes; a random quadratic in log space here;
- `rician_noise`: magnitude images have Rician, not Gaussian, noise (Gudbjartsson & Patz 1995, "The Rician
  distribution of noisy MRI data"): |image + n1 + i n2| with n1, n2 ~ N(0, sigma);
- `gamma_contrast`: a monotone change of the grey-level curve, as another T1 sequence or scanner gives.
"""
from __future__ import annotations

import numpy as np
from scipy.ndimage import affine_transform

from blindspots._validation import check_number


def _image(img: np.ndarray, name: str = "img") -> np.ndarray:
    a = np.asarray(img)
    if a.ndim != 2 or not np.issubdtype(a.dtype, np.floating):
        raise ValueError(f"{name}: expected a float [H, W] slice in [0, 1], got {a.dtype} of shape {a.shape}")
    return a


def _warp(img: np.ndarray, mask: np.ndarray, matrix: np.ndarray, shift: tuple[float, float]
          ) -> tuple[np.ndarray, np.ndarray]:
    """Output pixel p takes input pixel centre + matrix @ (p - centre - shift): image bilinear, mask nearest."""
    a = _image(img)
    m = np.asarray(mask)
    if m.shape != a.shape:
        raise ValueError(f"mask: expected the image's shape {a.shape}, got {m.shape}")
    centre = (np.array(a.shape) - 1) / 2.0
    offset = centre - matrix @ (centre + np.asarray(shift, dtype=float))
    out = affine_transform(a, matrix, offset=offset, order=1, mode="constant", cval=0.0)
    out_m = affine_transform(m, matrix, offset=offset, order=0, mode="constant", cval=0)
    return out.astype(np.float32), out_m.astype(np.uint8)


def head_pose(img: np.ndarray, mask: np.ndarray, angle: float, shift: tuple[float, float] = (0.0, 0.0)
              ) -> tuple[np.ndarray, np.ndarray]:
    """Rotate by `angle` degrees (counter-clockwise) about the centre and shift by (rows, cols) pixels.
    Returns (image float [H, W], bilinear; mask uint8 [H, W], nearest); outside the field of view is 0."""
    t = np.deg2rad(check_number(angle, "angle"))
    return _warp(img, mask, np.array([[np.cos(t), np.sin(t)], [-np.sin(t), np.cos(t)]]), shift)


def field_of_view(img: np.ndarray, mask: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The same matrix over a field of view 1 / scale times as wide: the head shrinks about the centre by
    `scale` (< 1: a larger field of view, coarser pixels). Returns (image float [H, W], mask uint8 [H, W])."""
    s = check_number(scale, "scale", low=0, low_open=True)
    return _warp(img, mask, np.eye(2) / s, (0.0, 0.0))


def bias_field(shape: tuple[int, int], strength: float, rng: np.random.Generator) -> np.ndarray:
    """A smooth multiplicative field float [H, W] between 1 / (1 + strength) and 1 + strength: exp of a random
    quadratic in the pixel coordinates (scaled to [-1, 1]) whose largest |value| is log(1 + strength)."""
    s = check_number(strength, "strength", low=0)
    y, x = np.meshgrid(np.linspace(-1, 1, shape[0]), np.linspace(-1, 1, shape[1]), indexing="ij")
    terms = np.stack([x, y, x * x, y * y, x * y])
    log = np.tensordot(rng.normal(size=5), terms, axes=1)
    log *= np.log1p(s) / max(float(np.abs(log).max()), 1e-12)
    return np.exp(log).astype(np.float32)


def rician_noise(img: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """|img + n1 + i n2|, n1 and n2 ~ N(0, sigma) per pixel: float [H, W], clipped to [0, 1]."""
    a = _image(img)
    s = check_number(sigma, "sigma", low=0)
    re, im = a + rng.normal(0, s, a.shape), rng.normal(0, s, a.shape)
    return np.clip(np.hypot(re, im), 0, 1).astype(np.float32)


def gamma_contrast(img: np.ndarray, gamma: float) -> np.ndarray:
    """img ** gamma (gamma < 1 brightens the dark tissue, > 1 darkens it): float [H, W] in [0, 1]."""
    g = check_number(gamma, "gamma", low=0, low_open=True)
    return np.clip(_image(img), 0, 1).astype(np.float32) ** g
