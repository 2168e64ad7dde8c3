"""Failure-scenario clustering (Defuse's distillation): a Dirichlet-process Gaussian mixture over the
latent codes of identified failures. Lives in scenarios/ (not defuse/) so that scenario review and
segmentation scenarios can use it without importing an engine that imports them back.

scikit-learn's `BayesianGaussianMixture` with the truncated stick-breaking (Dirichlet process)
prior, K = 100 components, full covariance, otherwise scikit-learn defaults (paper appendix B.1).
The codes are randomly downsampled first (paper: to 50,000; our default 10,000, which fits a CPU's
time budget; the two timed in docs/benchmarks.md). Components with mixing weight > ε = 0.01 become the candidate
scenarios Λ = {(μ_j, Σ_j, π_j)}.
"""
from __future__ import annotations

import json
import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import multivariate_normal
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import BayesianGaussianMixture
from threadpoolctl import threadpool_limits

from blindspots._validation import check_number

logger = logging.getLogger(__name__)


@dataclass
class Scenarios:
    """Candidate failure scenarios Λ.

    means: float64 [J, D]; covariances: float64 [J, D, D]; weights: float64 [J] (mixture weights π_j
    of the kept components, not renormalised); component: int64 [J] index in the fitted mixture;
    fit: fit statistics (n_codes, seconds, converged, n_iter, lower_bound, ...).
    """

    means: np.ndarray
    covariances: np.ndarray
    weights: np.ndarray
    component: np.ndarray
    fit: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.weights)

    @property
    def latent_dim(self) -> int:
        return int(self.means.shape[1])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, means=self.means, covariances=self.covariances, weights=self.weights,
                 component=self.component, fit=np.array(json.dumps(self.fit)))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Scenarios":
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"path: expected a scenarios file (scenarios.npz), got {str(path)!r}")
        with np.load(path, allow_pickle=False) as z:
            return cls(z["means"], z["covariances"], z["weights"], z["component"], json.loads(str(z["fit"])))


class Distiller:
    """Fit the DP-GMM on identified codes and keep heavy components.

    Settings (paper defaults): n_components K = 100, covariance_type "full", weight_threshold
    ε = 0.01, max_codes 10,000 (paper 50,000; lowered for CPU fit time), max_iter 100 (sklearn's
    default, as in the paper), random_state for downsampling and the mixture's initialisation.
    tol_per_code: convergence threshold on the change of the variational lower bound, per code.
    scikit-learn's BayesianGaussianMixture compares its *total* (not per-sample) lower bound to
    `tol` (default 1e-3), which almost never converges for 10^4 codes; we pass
    tol = tol_per_code · n_codes, i.e. GaussianMixture's per-sample 1e-3 criterion.
    blas_threads: BLAS threads during the fit (default 1: the matrices are small (D x D), and
    multi-threaded BLAS spin-waits on a busy CPU — measured 7x slower on a shared 2-core machine);
    None leaves the process setting.
    """

    def __init__(self, n_components: int = 100, covariance_type: str = "full", weight_threshold: float = 0.01,
                 max_codes: int = 10_000, max_iter: int = 100, n_init: int = 1, random_state: int = 0,
                 tol_per_code: float = 1e-3, blas_threads: int | None = 1):
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.weight_threshold = weight_threshold
        self.max_codes = max_codes
        self.max_iter = max_iter
        self.n_init = n_init
        self.random_state = random_state
        self.tol_per_code = tol_per_code
        self.blas_threads = blas_threads
        self.mixture_: BayesianGaussianMixture | None = None
        self.scenarios_: Scenarios | None = None

    def fit(self, codes: np.ndarray | Any) -> "Distiller":
        """codes: float [M, D] latent codes of identified failures (or anything with `.codes`, such as
        `defuse.identify.Identified`: duck-typed so that scenarios/ never imports defuse/)."""
        if not isinstance(codes, np.ndarray) and hasattr(codes, "codes"):
            codes = codes.codes
        codes = np.asarray(codes, dtype=np.float64)
        if codes.ndim != 2:
            raise ValueError(f"codes: expected latent codes [M, D], got shape {codes.shape}")
        if len(codes) < 2:
            raise ValueError(f"codes: expected at least 2 identified failures to distill, got {len(codes)}; "
                             "identification found (almost) nothing — increase q, the noise, or check the classifier")
        if not np.isfinite(codes).all():
            raise ValueError("codes: expected finite values, got NaN/inf")
        check_number(self.weight_threshold, "weight_threshold", low=0, high=1, high_open=True)
        rng = np.random.default_rng(self.random_state)
        if self.max_codes is not None and len(codes) > self.max_codes:
            codes = codes[np.sort(rng.choice(len(codes), self.max_codes, replace=False))]
        k = min(self.n_components, len(codes))
        gmm = BayesianGaussianMixture(
            n_components=k, covariance_type=self.covariance_type,
            weight_concentration_prior_type="dirichlet_process", max_iter=self.max_iter, n_init=self.n_init,
            tol=self.tol_per_code * len(codes), random_state=self.random_state)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught, threadpool_limits(self.blas_threads):
            warnings.simplefilter("always", ConvergenceWarning)
            gmm.fit(codes)
        seconds = time.perf_counter() - t0
        if not gmm.converged_:
            logger.warning("DP-GMM did not converge in %d iterations on %d codes (%.1f s)", self.max_iter,
                           len(codes), seconds)
        self.mixture_ = gmm
        keep = np.flatnonzero(gmm.weights_ > self.weight_threshold)
        covs = gmm.covariances_
        if self.covariance_type == "diag":
            covs = np.stack([np.diag(c) for c in covs])
        elif self.covariance_type == "spherical":
            covs = np.stack([np.eye(codes.shape[1]) * c for c in covs])
        elif self.covariance_type == "tied":
            covs = np.repeat(covs[None], k, axis=0)
        self.scenarios_ = Scenarios(
            gmm.means_[keep].copy(), np.asarray(covs)[keep].copy(), gmm.weights_[keep].copy(), keep.astype(np.int64),
            {"n_codes": int(len(codes)), "n_components": int(k), "seconds": round(seconds, 3),
             "converged": bool(gmm.converged_), "n_iter": int(gmm.n_iter_), "lower_bound": float(gmm.lower_bound_),
             "max_iter": int(self.max_iter), "tol": float(self.tol_per_code * len(codes)), "weight_threshold": float(self.weight_threshold),
             "n_kept": int(len(keep)), "convergence_warnings": len(caught)})
        return self

    def predict_proba(self, codes: np.ndarray) -> np.ndarray:
        """Responsibilities of the kept scenarios for codes float [M, D] -> float64 [M, J]."""
        if self.mixture_ is None or self.scenarios_ is None:
            raise ValueError("distiller: expected a fitted Distiller, got an unfitted one")
        return self.mixture_.predict_proba(np.asarray(codes, dtype=np.float64))[:, self.scenarios_.component]


def distill(identified: Any, **kwargs) -> Scenarios:
    """Shortcut: `Distiller(**kwargs).fit(identified).scenarios_`."""
    return Distiller(**kwargs).fit(identified).scenarios_  # type: ignore[return-value]


def scenario_responsibilities(scenarios: Scenarios, codes: np.ndarray) -> np.ndarray:
    """Posterior probability of each kept scenario for codes float [M, D] -> float64 [M, J].

    Computed from the saved means/covariances/weights alone (no fitted mixture needed), normalised
    over the kept scenarios.
    """
    codes = np.asarray(codes, dtype=np.float64)
    if codes.ndim != 2 or codes.shape[1] != scenarios.latent_dim:
        raise ValueError(f"codes: expected shape [M, {scenarios.latent_dim}], got {codes.shape}")
    logp = np.stack([np.log(w) + multivariate_normal(m, c, allow_singular=True).logpdf(codes)
                     for m, c, w in zip(scenarios.means, scenarios.covariances, scenarios.weights)], axis=1)
    logp = logp.reshape(len(codes), len(scenarios))
    logp -= logp.max(axis=1, keepdims=True)
    p = np.exp(logp)
    return p / p.sum(axis=1, keepdims=True)
