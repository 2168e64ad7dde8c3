"""Draw latent codes from failure scenarios: z ~ N(μ_j, τ·Σ_j) (Defuse Algorithm 2)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from blindspots._validation import check_number

# Sample diversity τ per dataset (Defuse §4.1): 0.5 for MNIST, 0.01 for SVHN and German signs.
TAU = {"mnist": 0.5, "svhn": 0.01, "german_signs": 0.01}


def sample_codes(means: np.ndarray, covariances: np.ndarray, n_per: int, *, tau: float = 0.5, seed: int = 0,
                 which: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """n_per codes from each scenario j in `which` (default all).

    means: float [J, D]; covariances: float [J, D, D]; tau: covariance scale (paper MNIST default 0.5).
    Returns (codes float32 [len(which)*n_per, D], scenario int64 [len(which)*n_per]), grouped by scenario.
    Each scenario has its own random stream (seed, j), so adding scenarios never changes the others.
    """
    means = np.asarray(means, dtype=np.float64)
    covariances = np.asarray(covariances, dtype=np.float64)
    if means.ndim != 2 or covariances.shape != (len(means), means.shape[1], means.shape[1]):
        raise ValueError(f"covariances: expected shape [J, D, D] matching means {means.shape}, got {covariances.shape}")
    if n_per < 0:
        raise ValueError(f"n_per: expected a non-negative count, got {n_per}")
    check_number(tau, "tau", low=0, low_open=True)  # the covariance scale
    which = list(range(len(means))) if which is None else [int(j) for j in which]
    for j in which:
        if not 0 <= j < len(means):
            raise ValueError(f"which: expected scenario ids in 0..{len(means) - 1}, got {j}")
    d = means.shape[1]
    codes = np.zeros((len(which) * n_per, d), dtype=np.float32)
    for i, j in enumerate(which):
        rng = np.random.default_rng([seed, j])
        codes[i * n_per:(i + 1) * n_per] = rng.multivariate_normal(means[j], tau * covariances[j], size=n_per,
                                                                   method="cholesky" if _is_pd(covariances[j])
                                                                   else "eigh")
    return codes, np.repeat(np.asarray(which, dtype=np.int64), n_per)


def _is_pd(cov: np.ndarray) -> bool:
    try:
        np.linalg.cholesky(cov)
        return True
    except np.linalg.LinAlgError:
        return False
