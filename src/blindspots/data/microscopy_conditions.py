"""Acquisition differences of a microscope applied to a frame: defocus, exposure and photon (shot) noise.

Each acts on an image float [H, W] in [0, 1] (a channel through its fixed display window,
`blindspots.data.microscopy.window`), so a benchmark can turn them into conditions of a pool or a test set:

- `defocus`: the focal plane off the cells: a Gaussian point-spread function of `sigma` pixels;
- `exposure`: a shorter exposure or weaker lamp: the signal above the window's floor times `factor`;
- `shot_noise`: Poisson photon noise at `photons` for full scale plus Gaussian read noise, the noise model
  of a camera at low light ("Practical Poissonian-Gaussian noise modeling and fitting for single-image
  raw-data", Foi, Trimeche, Katkovnik and Egiazarian, IEEE TIP 2008).
"""
from __future__ import annotations

import numpy as np
from scipy.ndimage import gaussian_filter

from blindspots._validation import check_number


def _image(img: np.ndarray) -> np.ndarray:
    a = np.asarray(img)
    if a.ndim != 2 or not np.issubdtype(a.dtype, np.floating):
        raise ValueError(f"img: expected a float [H, W] frame in [0, 1], got {a.dtype} of shape {a.shape}")
    return a


def defocus(img: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur of `sigma` pixels (reflected at the border): float32 [H, W]."""
    s = check_number(sigma, "sigma", low=0)
    return gaussian_filter(_image(img).astype(np.float32), s, mode="reflect")


def exposure(img: np.ndarray, factor: float) -> np.ndarray:
    """img * factor (factor < 1: dimmer), clipped to [0, 1]: float32 [H, W]."""
    f = check_number(factor, "factor", low=0)
    return np.clip(_image(img) * f, 0, 1).astype(np.float32)


def shot_noise(img: np.ndarray, photons: float, rng: np.random.Generator, read_sd: float = 0.01) -> np.ndarray:
    """Poisson(img * photons) / photons + N(0, read_sd), clipped to [0, 1]: float32 [H, W]. photons: the
    count at full scale (fewer: noisier)."""
    p = check_number(photons, "photons", low=0, low_open=True)
    r = check_number(read_sd, "read_sd", low=0)
    a = np.clip(_image(img), 0, 1)
    out = rng.poisson(a * p) / p + rng.normal(0, r, a.shape)
    return np.clip(out, 0, 1).astype(np.float32)
