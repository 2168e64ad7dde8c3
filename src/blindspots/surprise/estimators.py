"""Surprise adequacy estimators, one model per class: MDSA, LSA (Kim et al. 2023) and DSA (Kim et al. 2019).

All three follow scikit-learn: settings in the constructor, ``fit(traces, labels)`` returns self,
``score(traces, classes)`` returns one surprise value per trace.

- traces: float [n, d] activation traces (float32 or float64), finite.
- labels / classes: int [n] class ids; at fit the *label* class of each trace, at scoring the class
  whose model scores it (the *predicted* class in the paper).

Degenerate inputs (documented fallbacks, never NaN):
- NaN / inf features raise ``ValueError`` at fit and at score.
- A class with fewer than ``min_traces`` traces is not modelled; it is listed in ``skipped_classes_``
  and scoring a trace of that class raises ``ValueError`` (image-level code leaves such classes out).
- Neurons whose variance is below ``var_threshold`` in any modelled class are dropped for every class
  (the union, as in Kim et al.'s LSA); if no neuron is left, ``fit`` raises ``ValueError``.
- Singular or ill-conditioned covariances (constant features, d larger than the number of traces):
  MDSA raises eigenvalues below ``reg * largest`` to that floor; LSA adds a ridge of
  ``reg * mean variance`` to the data covariance only when its Cholesky factorisation fails (then it no
  longer equals scipy's ``gaussian_kde``, which would raise); both are recorded in ``regularised_``.
- DSA floors the neighbour's distance to the other classes at ``eps`` so duplicate traces give a large
  finite value instead of inf.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from blindspots._validation import check_labels, check_traces
from blindspots.surprise._threads import run_split, split_threads

# Lazy imports: numba (its JIT kernels are compiled or loaded by their first call).

logger = logging.getLogger(__name__)

#: Rows per MDSA scoring block at d <= 64: [4096, d] float32 blocks stay in L2 cache (measured fastest);
#: wider traces use fewer rows (`mdsa_block_rows`), so a block stays at about 1 MB.
MDSA_BLOCK_ROWS = 4096


def mdsa_block_rows(d: int) -> int:
    """Rows per MDSA block for d features: MDSA_BLOCK_ROWS * 64 / d, at least 1, at most MDSA_BLOCK_ROWS."""
    return max(1, min(MDSA_BLOCK_ROWS, MDSA_BLOCK_ROWS * 64 // max(d, 1)))

#: Largest distance of a class mean from the origin (MDSA of the zero trace) at which float32 traces are
#: whitened uncentred and centred after the matmul (see MDSA); farther classes are centred first.
UNCENTRED_MAX_DISTANCE = 32.0

#: Elements of one LSA [rows, n] block of exponentials (8 MB in float64): measured fastest for n = 10,000.
LSA_BLOCK_ELEMENTS = 1 << 20

#: Neuron variance threshold of Kim et al.'s reference implementation (``var_threshold=1e-5``).
DEFAULT_VAR_THRESHOLD = 1e-5


def _chunks(n: int, size: int):
    for start in range(0, n, size):
        yield start, min(n, start + size)


class SurpriseEstimator:
    """Shared per-class machinery: validation, neuron filter, fitting-set statistics, persistence.

    Fitted attributes:
        classes_: int64 [K] modelled class ids (sorted).
        n_features_in_: d, features per trace at fit.
        kept_features_: int64 [d'] features used after the variance filter.
        skipped_classes_: dict class id -> reason for classes not modelled.
        regularised_: dict class id -> description of the fallback used for that class.
        sa_mean_, sa_std_: float64 [K] mean and std of the SA of each class's own fitting traces
            (the z-score statistics for group SA; std floored at 1e-12).
    """

    name: ClassVar[str] = "sa"

    def __init__(self, *, var_threshold: float | None = DEFAULT_VAR_THRESHOLD, min_traces: int = 2,
                 chunk_size: int = 65536) -> None:
        self.var_threshold = var_threshold
        self.min_traces = min_traces
        self.chunk_size = chunk_size

    # ---- public API ----
    def fit(self, traces: np.ndarray, labels: np.ndarray) -> "SurpriseEstimator":
        """Fit one model per label class. traces: float [n, d]; labels: int [n]."""
        self._check_params()
        x = check_traces(traces)
        y = check_labels(labels, x.shape[0])
        self.n_features_in_ = int(x.shape[1])
        counts = {int(c): int((y == c).sum()) for c in np.unique(y)}
        self.skipped_classes_ = {c: f"{k} traces < min_traces={self.min_traces}"
                                 for c, k in counts.items() if k < self.min_traces}
        for c, why in self.skipped_classes_.items():
            logger.warning("class %d is not modelled: %s", c, why)
        classes = np.array(sorted(c for c in counts if c not in self.skipped_classes_), dtype=np.int64)
        if classes.size == 0:
            raise ValueError(f"labels: expected at least one class with >= {self.min_traces} traces, "
                             f"got class counts {counts}")
        self.classes_ = classes
        self.kept_features_ = self._variance_filter(x, y, classes)
        self.regularised_: dict[int, str] = {}
        self._fit_classes(x[:, self.kept_features_].astype(np.float64), y)
        self._fit_stats(x, y)
        return self

    def score(self, traces: np.ndarray, classes: np.ndarray | int) -> np.ndarray:
        """Surprise of each trace under the model of its class. traces: float [m, d];
        classes: int [m] (or one int for all). Returns float64 [m], finite."""
        self._check_fitted()
        x, screen_after = self._score_traces(traces)
        c = check_labels(classes, x.shape[0], name="classes")
        c_min, c_max = int(c.min()), int(c.max())
        if c_min == c_max:
            present = [c_min]
        else:  # presence by bincount: no sort of all m ids
            present = (np.flatnonzero(np.bincount(c - c_min)) + c_min if c_max - c_min < 4 * c.size + 1024
                       else np.unique(c)).tolist()
        unknown = sorted(set(present) - set(self.classes_.tolist()))
        if unknown:
            raise ValueError(f"classes: expected ids of modelled classes {self.classes_.tolist()}, got {unknown}"
                             + (f" (skipped at fit: {self.skipped_classes_})" if self.skipped_classes_ else ""))
        xk = x if self.kept_features_.size == x.shape[1] else x[:, self.kept_features_]
        if c_min == c_max and self._blocks_itself:  # one class, scored in one call (no chunk loop)
            return self._screened(self._score_class(xk, int(c[0])), x, screen_after)
        if c_min == c_max:  # one class (heatmaps, per-class calls): no sort, no copies
            out = np.empty(x.shape[0], dtype=np.float64)
            for s, e in _chunks(x.shape[0], self.chunk_size):
                out[s:e] = self._score_class(xk[s:e], int(c[0]))
            return self._screened(out, x, screen_after)
        # one stable sort by class instead of a boolean mask and a fancy-index copy per class
        order = np.argsort(c, kind="stable")
        sorted_c = c[order]
        starts = np.flatnonzero(np.r_[True, sorted_c[1:] != sorted_c[:-1]])
        ends = np.r_[starts[1:], c.size]
        out = np.empty(x.shape[0], dtype=np.float64)
        for lo, hi in zip(starts.tolist(), ends.tolist()):
            for s, e in _chunks(hi - lo, self.chunk_size):
                idx = order[lo + s:lo + e]
                out[idx] = self._score_class(xk[idx], int(sorted_c[lo]))
        return self._screened(out, x, screen_after)

    #: True where every value of a trace reaches its score (NaN / inf in, non-finite out), so the finite
    #: screen of the traces can wait for the scores (MDSA: the screen was a whole extra pass over the
    #: traces, ~20% of a call on 1M x 64 float32)
    _scores_show_non_finite: ClassVar[bool] = False

    #: True where `_score_class` blocks its rows itself with bounded temporaries (MDSA), so one class's rows
    #: go in one call: each chunk was one thread split and join more (16 per 1M traces)
    _blocks_itself: ClassVar[bool] = False

    def _score_traces(self, traces: Any) -> tuple[np.ndarray, bool]:
        """(traces as check_traces returns them, whether their finite screen is left to `_screened`)."""
        arr = np.asarray(traces)
        if (self._scores_show_non_finite and arr.ndim == 2 and arr.dtype in (np.float32, np.float64)
                and arr.shape[1] == self.kept_features_.size == self.n_features_in_):
            check_traces(arr[:1], d=self.n_features_in_)  # shape, d, n >= 1 (and the first trace's values)
            return arr, True
        return check_traces(traces, d=self.n_features_in_), False

    def _screened(self, out: np.ndarray, x: np.ndarray, screen_after: bool) -> np.ndarray:
        """out, after check_traces(x) (which raises for NaN / inf) where a deferred screen sees a
        non-finite score."""
        if screen_after and not np.isfinite(np.add.reduce(out)):
            check_traces(x, d=self.n_features_in_)
        return out

    def class_index(self, cls: int) -> int:
        """Position of class id `cls` in classes_ (ValueError if not modelled)."""
        pos = np.searchsorted(self.classes_, cls)
        if pos >= self.classes_.size or self.classes_[pos] != cls:
            raise ValueError(f"cls: expected a modelled class {self.classes_.tolist()}, got {cls}")
        return int(pos)

    # ---- persistence (npz, no pickle) ----
    def save(self, path: str | Path) -> Path:
        """Write the fitted estimator to an ``.npz`` file (arrays + JSON settings)."""
        self._check_fitted()
        path = Path(path)
        meta = {"kind": self.name, "params": self._params(), "n_features_in_": self.n_features_in_,
                "skipped_classes_": {str(k): v for k, v in self.skipped_classes_.items()},
                "regularised_": {str(k): v for k, v in self.regularised_.items()}}
        arrays = {"classes_": self.classes_, "kept_features_": self.kept_features_,
                  "sa_mean_": self.sa_mean_, "sa_std_": self.sa_std_, **self._state()}
        with open(path, "wb") as fh:
            np.savez(fh, __meta__=np.array(json.dumps(meta)), **arrays)
        return path

    # ---- helpers for subclasses ----
    def _params(self) -> dict[str, Any]:
        return {"var_threshold": self.var_threshold, "min_traces": self.min_traces, "chunk_size": self.chunk_size}

    def _check_params(self) -> None:
        if self.var_threshold is not None and not (self.var_threshold >= 0):
            raise ValueError(f"var_threshold: expected a non-negative float or None, got {self.var_threshold}")
        if int(self.min_traces) < 1:
            raise ValueError(f"min_traces: expected an integer >= 1, got {self.min_traces}")
        if int(self.chunk_size) < 1:
            raise ValueError(f"chunk_size: expected a positive integer, got {self.chunk_size}")

    def _check_fitted(self) -> None:
        if not hasattr(self, "classes_"):
            raise ValueError(f"{type(self).__name__}: expected a fitted estimator, call fit() first")

    def _variance_filter(self, x: np.ndarray, y: np.ndarray, classes: np.ndarray) -> np.ndarray:
        d = x.shape[1]
        if self.var_threshold is None:
            return np.arange(d, dtype=np.int64)
        drop = np.zeros(d, dtype=bool)
        for c in classes:
            drop |= x[y == c].astype(np.float64).var(axis=0) < self.var_threshold
        kept = np.flatnonzero(~drop).astype(np.int64)
        if kept.size == 0:
            raise ValueError(
                f"traces: expected some features with variance >= var_threshold={self.var_threshold} in every "
                "class, got none (all features constant); lower var_threshold or pick another layer"
            )
        if drop.any():
            logger.info("dropped %d of %d low-variance neurons", int(drop.sum()), d)
        return kept

    def _fit_stats(self, x: np.ndarray, y: np.ndarray) -> None:
        mean = np.zeros(self.classes_.size)
        std = np.ones(self.classes_.size)
        for i, c in enumerate(self.classes_):
            sa = self.score(x[y == c], int(c))
            mean[i], std[i] = sa.mean(), max(float(sa.std()), 1e-12)
        self.sa_mean_, self.sa_std_ = mean, std
        self._warn_flat_stats()

    def _warn_flat_stats(self) -> None:
        """Warn about classes whose fitting traces all get (nearly) one SA: z-scored image and group SA
        divide by that std and come out in the millions (e.g. one feature vector per image, fewer
        distinct traces than features)."""
        flat = [int(c) for c, m, s in zip(self.classes_, self.sa_mean_, self.sa_std_) if s <= 1e-4 * max(abs(m), 1.0)]
        if flat:
            logger.warning("classes %s: the SA of their fitting traces is (nearly) constant, so z-scored image "
                           "SA will be huge; fit on more distinct traces (more images, per-pixel feature maps)",
                           flat)

    def _fit_classes(self, x: np.ndarray, y: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _score_class(self, x: np.ndarray, cls: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _state(self) -> dict[str, np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class MDSA(SurpriseEstimator):
    """Mahalanobis-distance surprise (paper eq. 3): sqrt((a - mu_c)^T S_c^-1 (a - mu_c)).

    S_c is the unbiased (ddof=1) covariance of class c's fitting traces. The whitening matrix
    W_c = diag(w^-1/2) V^T from S_c = V diag(w) V^T is precomputed, so scoring is one float32 matmul:
    MDSA = ||(a - mu_c) W_c^T||. Eigenvalues below ``reg * max(w)`` are raised to that floor
    (singular covariances: constant features, d > n); the default 1e-6 leaves well-conditioned
    covariances unchanged to float precision.

    var_threshold: neurons below this variance are dropped as for LSA (default 1e-5, Kim et al.;
        None keeps all). Dead ReLU channels are constant in training and would otherwise dominate.

    Scoring float32 traces of a class whose mean lies near the origin (``origin_distance_`` <=
    ``UNCENTRED_MAX_DISTANCE``) skips the centring pass: z = a W_c^T by the matmul straight from the
    input, then ||z - mu_c W_c^T|| in the norm kernel. The centring pass was a whole extra read of the
    traces from memory (~20% of a call at d = 64); the cancellation it avoided costs at most a few float32
    ulps at that distance (measured: max relative error 3e-6 against 1e-6 centred, at d = 64). Float64
    traces and classes far from the origin are centred first, as before.
    """

    name = "mdsa"
    _scores_show_non_finite = True  # every kept feature enters the centred matmul, whose norm turns non-finite
    _blocks_itself = True

    def __init__(self, *, reg: float = 1e-6, var_threshold: float | None = DEFAULT_VAR_THRESHOLD,
                 min_traces: int = 2, chunk_size: int = 65536) -> None:
        super().__init__(var_threshold=var_threshold, min_traces=min_traces, chunk_size=chunk_size)
        self.reg = reg

    def _params(self) -> dict[str, Any]:
        return {**super()._params(), "reg": self.reg}

    def _check_params(self) -> None:
        super()._check_params()
        if not (0 < self.reg < 1):
            raise ValueError(f"reg: expected a float in (0, 1), got {self.reg}")

    def _fit_classes(self, x: np.ndarray, y: np.ndarray) -> None:
        k, d = self.classes_.size, x.shape[1]
        self.means_ = np.zeros((k, d))
        self.whiten_ = np.zeros((k, d, d), dtype=np.float32)  # W_c^T, so z = (a - mu) @ whiten_[c]
        for i, c in enumerate(self.classes_):
            xc = x[y == c]
            mu = xc.mean(axis=0)
            cov = np.atleast_2d(np.cov(xc, rowvar=False, ddof=1))
            w, v = np.linalg.eigh(cov)
            floor = self.reg * max(float(w.max()), 1e-300)
            if w.min() < floor:
                self.regularised_[int(c)] = (f"{int((w < floor).sum())} of {d} covariance eigenvalues raised "
                                             f"to reg*max={floor:.3g}")
                w = np.maximum(w, floor)
            self.means_[i] = mu
            self.whiten_[i] = (v / np.sqrt(w)).astype(np.float32)
        self._set_shifts()

    def _set_shifts(self) -> None:
        """shift_ float32 [K, d'] = mu_c W_c^T (the whitened mean) and origin_distance_ float64 [K] its norm:
        the MDSA of the zero trace, which bounds the cancellation of centring after the matmul."""
        shift = np.einsum("kd,kde->ke", self.means_, self.whiten_.astype(np.float64))
        self.shift_ = shift.astype(np.float32)
        self.origin_distance_ = np.linalg.norm(shift, axis=1)
        self.__dict__.pop("_padded", None)  # a refit or load invalidates the fused path's matrices

    def padded_whitening(self, pad: int) -> tuple[np.ndarray, torch.Tensor]:
        """(means float32 [K, d], whitening float32 [K, d, D]) over all d input features for the fused
        heatmaps: dropped features have mean 0 and zero rows, D = d' rounded up to a multiple of `pad` with
        zero columns. Built once per fit (cached; read-only)."""
        cache = self.__dict__.setdefault("_padded", {})
        if pad not in cache:
            k, d, kept = self.classes_.size, self.n_features_in_, self.kept_features_
            cols = -(-kept.size // pad) * pad
            means = np.zeros((k, d), dtype=np.float32)
            means[:, kept] = self.means_
            whiten = np.zeros((k, d, cols), dtype=np.float32)
            whiten[:, kept, :kept.size] = self.whiten_
            means.flags.writeable = False
            cache[pad] = (means, torch.from_numpy(whiten))
        return cache[pad]

    def _score_class(self, x: np.ndarray, cls: int) -> np.ndarray:
        i = self.class_index(cls)
        wt = torch.from_numpy(self.whiten_[i])
        x = np.ascontiguousarray(x)
        xt = torch.from_numpy(x) if x.flags.writeable else torch.tensor(x)  # torch warns on read-only views
        from blindspots.surprise._row_norms import row_norms, shifted_row_norms  # numba: compiled on first use

        d, n = wt.shape[0], x.shape[0]
        out = np.empty(n, dtype=np.float64)
        block = mdsa_block_rows(d)
        if xt.dtype == torch.float32 and self.origin_distance_[i] <= UNCENTRED_MAX_DISTANCE:
            shift = self.shift_[i]

            def rows(lo: int, hi: int) -> None:  # the matmul reads the input; centring fused into the norm
                z = torch.empty(min(block, hi - lo), wt.shape[1])
                zn = z.numpy()
                for s, e in _chunks(hi - lo, block):
                    torch.mm(xt[lo + s:lo + e], wt, out=z[:e - s])
                    shifted_row_norms(zn[:e - s], shift, out[lo + s:lo + e])
        else:
            mu = torch.from_numpy(self.means_[i]).to(xt.dtype)

            def rows(lo: int, hi: int) -> None:
                # row blocks that stay in L2; preallocated buffers, three single-threaded steps per block
                centred = torch.empty(min(block, hi - lo), d, dtype=xt.dtype)
                z = torch.empty(centred.shape[0], wt.shape[1])
                zn = z.numpy()
                for s, e in _chunks(hi - lo, block):
                    c = centred[:e - s]
                    torch.sub(xt[lo + s:lo + e], mu, out=c)  # centre first: no cancellation after the matmul
                    torch.mm(c if c.dtype == torch.float32 else c.float(), wt, out=z[:e - s])
                    row_norms(zn[:e - s], out[lo + s:lo + e])

        # one part per torch thread, each on its own thread (see _threads: no barrier per block)
        run_split(n, split_threads(n, 2 * block), rows, align=block)
        return out

    def whitening(self, cls: int) -> tuple[np.ndarray, np.ndarray]:
        """(mean float64 [d'], W^T float32 [d', d']) of class `cls` over kept_features_; MDSA = ||(a - mean) W^T||."""
        i = self.class_index(cls)
        return self.means_[i], self.whiten_[i]

    def _state(self) -> dict[str, np.ndarray]:
        return {"means_": self.means_, "whiten_": self.whiten_}

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        self.means_, self.whiten_ = arrays["means_"], arrays["whiten_"]
        self._set_shifts()


class LSA(SurpriseEstimator):
    """Likelihood surprise (paper eq. 1-2): -log f(a), f a Gaussian KDE of class c's fitting traces.

    Bandwidth: Scott's rule, the data covariance (ddof=1) times n^(-2/(d+4)) — exactly
    ``scipy.stats.gaussian_kde(traces.T)``; the value equals ``-gaussian_kde(...).logpdf(a)`` after the
    union of low-variance neurons is dropped (threshold 1e-5 as in Kim et al.). Computed in float64 and
    log space: the traces are whitened once by the Cholesky factor, -||a - x||^2 / 2 comes from one
    torch matmul of augmented rows [a, -||a||^2/2, 1] . [x; 1; -||x||^2/2] per block of rows and the sum
    is a log-sum-exp (rows whose sum would underflow are redone with the max taken out), so it never
    underflows. Cost per trace: O(n d); rows are scored in [block, n] blocks of about 8 MB
    (``LSA_BLOCK_ELEMENTS``), multi-threaded per ``torch.get_num_threads()``.

    dtype: "float64" (default; equals scipy to ~1e-12 relative) or "float32" for the distance matmul and
        the exponentials (about 2x faster; traces are centred per class first, which keeps the error small
        — measured in tests and the benchmark, not guaranteed to 1e-6).
    """

    name = "lsa"

    def __init__(self, *, reg: float = 1e-6, var_threshold: float | None = DEFAULT_VAR_THRESHOLD,
                 min_traces: int = 2, dtype: str = "float64", chunk_size: int = 512) -> None:
        super().__init__(var_threshold=var_threshold, min_traces=min_traces, chunk_size=chunk_size)
        self.reg = reg
        self.dtype = dtype

    def _params(self) -> dict[str, Any]:
        return {**super()._params(), "reg": self.reg, "dtype": self.dtype}

    def _check_params(self) -> None:
        super()._check_params()
        if not (0 < self.reg < 1):
            raise ValueError(f"reg: expected a float in (0, 1), got {self.reg}")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"dtype: expected 'float64' (exact, the default) or 'float32' (faster), got {self.dtype!r}")

    def _fit_classes(self, x: np.ndarray, y: np.ndarray) -> None:
        d = x.shape[1]
        self.__dict__.pop("_torch_cache", None)  # a refit invalidates the scoring tensors
        self.chol_: list[np.ndarray] = []   # lower Cholesky factor of the kernel covariance
        self.center_: list[np.ndarray] = []
        self.white_: list[np.ndarray] = []  # whitened fitting traces float64 [n_c, d]
        self.sqnorm_: list[np.ndarray] = []
        self.log_norm_ = np.zeros(self.classes_.size)  # log(n_c) + 0.5 log det(2 pi H_c)
        for c in self.classes_:
            xc = x[y == c]
            n = xc.shape[0]
            factor = n ** (-1.0 / (d + 4))  # Scott's rule, as scipy.stats.gaussian_kde
            cov = np.atleast_2d(np.cov(xc, rowvar=False, ddof=1))
            chol = self._cholesky(cov, int(c)) * factor
            center = xc.mean(axis=0)  # distances are translation invariant; centring keeps float32 accurate
            white = np.linalg.solve(chol, (xc - center).T).T  # L^-1 (x - center) for every trace
            self.center_.append(center)
            self.chol_.append(chol)
            self.white_.append(white)
            self.sqnorm_.append(np.einsum("ij,ij->i", white, white))
            log_det = 2.0 * np.log(np.diag(chol) * np.sqrt(2 * np.pi)).sum()
            self.log_norm_[len(self.chol_) - 1] = np.log(n) + 0.5 * log_det

    def _cholesky(self, cov: np.ndarray, cls: int) -> np.ndarray:
        try:
            return np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            ridge = self.reg * max(float(np.trace(cov)) / cov.shape[0], 1e-300)
            for _ in range(12):
                try:
                    chol = np.linalg.cholesky(cov + ridge * np.eye(cov.shape[0]))
                    self.regularised_[cls] = f"singular covariance; ridge {ridge:.3g} added to the diagonal"
                    logger.warning("class %d: %s", cls, self.regularised_[cls])
                    return chol
                except np.linalg.LinAlgError:
                    ridge *= 10.0
            raise ValueError(f"traces: covariance of class {cls} could not be factorised even with a ridge") from None

    def _score_class(self, x: np.ndarray, cls: int) -> np.ndarray:
        i = self.class_index(cls)
        chol, center, ref = self._torch_state(i)
        xc = torch.from_numpy(np.asarray(x, dtype=np.float64)) - center
        a = torch.linalg.solve_triangular(chol.T, xc, upper=True, left=False)  # L^-1 (x - center), [m, d]
        # augmented rows: [a, -||a||^2 / 2, 1] . [x; 1; -||x||^2 / 2] = -||a - x||^2 / 2 in one matmul
        a_aug = torch.cat([a, -0.5 * (a * a).sum(1, keepdim=True), torch.ones(a.shape[0], 1, dtype=a.dtype)], 1)
        a_aug = a_aug.to(ref.dtype)
        out = torch.empty(a.shape[0], dtype=torch.float64)
        block = max(16, LSA_BLOCK_ELEMENTS // ref.shape[1])  # [block, n] exponentials stay in cache
        for s, e in _chunks(a.shape[0], block):
            out[s:e] = _logsumexp_neg_half_sq(a_aug[s:e], ref)
        return (self.log_norm_[i] - out).numpy()

    def _torch_state(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cholesky factor, centre (float64) and augmented reference [d + 2, n_c] of class i in the scoring
        dtype: rows x^T, 1, -||x||^2 / 2 of the whitened fitting traces."""
        cache = self.__dict__.setdefault("_torch_cache", {})
        if (i, self.dtype) not in cache:
            white = torch.from_numpy(self.white_[i])
            ref = torch.cat([white.T, torch.ones(1, white.shape[0], dtype=white.dtype),
                             torch.from_numpy(-0.5 * self.sqnorm_[i])[None]])
            ref = ref.float() if self.dtype == "float32" else ref
            cache[i, self.dtype] = (torch.from_numpy(self.chol_[i]), torch.from_numpy(self.center_[i]),
                                    ref.contiguous())
        return cache[i, self.dtype]

    def _state(self) -> dict[str, np.ndarray]:
        state: dict[str, np.ndarray] = {"log_norm_": self.log_norm_}
        for i in range(self.classes_.size):
            state[f"chol_{i}"] = self.chol_[i]
            state[f"white_{i}"] = self.white_[i]
            state[f"center_{i}"] = self.center_[i]
        return state

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        k = arrays["classes_"].size
        self.__dict__.pop("_torch_cache", None)
        self.log_norm_ = arrays["log_norm_"]
        self.chol_ = [arrays[f"chol_{i}"] for i in range(k)]
        self.center_ = [arrays[f"center_{i}"] for i in range(k)]
        self.white_ = [arrays[f"white_{i}"] for i in range(k)]
        self.sqnorm_ = [np.einsum("ij,ij->i", w, w) for w in self.white_]


class DSA(SurpriseEstimator):
    """Distance surprise (Kim et al., ICSE 2019): ||a - x_a|| / ||x_a - x_b||.

    x_a is the nearest fitting trace of the scored class c; x_b is the fitting trace of any other class
    nearest to x_a. The denominator depends only on x_a, so it is precomputed for every fitting trace at
    fit. Needs at least two modelled classes. No neuron filter by default (Kim et al. use all neurons).

    eps: floor of the denominator (duplicate traces across classes), so values stay finite.
    """

    name = "dsa"

    def __init__(self, *, eps: float = 1e-12, var_threshold: float | None = None, min_traces: int = 1,
                 chunk_size: int = 1024) -> None:
        super().__init__(var_threshold=var_threshold, min_traces=min_traces, chunk_size=chunk_size)
        self.eps = eps

    def _params(self) -> dict[str, Any]:
        return {**super()._params(), "eps": self.eps}

    def _fit_classes(self, x: np.ndarray, y: np.ndarray) -> None:
        if self.classes_.size < 2:
            raise ValueError(f"labels: DSA expects traces of at least two classes, got only {self.classes_.tolist()}")
        keep = np.isin(y, self.classes_)
        x, y = x[keep], y[keep]
        self.ref_: list[np.ndarray] = []
        self.ref_sq_: list[np.ndarray] = []
        self.other_dist_: list[np.ndarray] = []
        for c in self.classes_:
            xc, xo = x[y == c], x[y != c]
            dist, _ = _nearest(xc, xo, self.chunk_size)
            self.ref_.append(xc)
            self.ref_sq_.append(np.einsum("ij,ij->i", xc, xc))
            self.other_dist_.append(np.maximum(dist, self.eps))

    def _score_class(self, x: np.ndarray, cls: int) -> np.ndarray:
        i = self.class_index(cls)
        dist_a, idx = _nearest(x.astype(np.float64), self.ref_[i], self.chunk_size, self.ref_sq_[i])
        return dist_a / self.other_dist_[i][idx]

    def _fit_stats(self, x: np.ndarray, y: np.ndarray) -> None:
        """sa_mean_, sa_std_ from leave-one-out DSA of each class's fitting traces: scored against the
        fitting set that holds them, every trace is its own nearest neighbour (DSA 0, std 0), and image
        and group SA (z-scores) came out near 1e12. A class with one trace gets mean 0, std 1."""
        mean = np.zeros(self.classes_.size)
        std = np.ones(self.classes_.size)
        for i in range(self.classes_.size):
            ref = self.ref_[i]
            if ref.shape[0] < 2:
                continue
            dist_a, idx = _nearest(ref, ref, self.chunk_size, self.ref_sq_[i], exclude_self=True)
            sa = dist_a / self.other_dist_[i][idx]
            mean[i], std[i] = sa.mean(), max(float(sa.std()), 1e-12)
        self.sa_mean_, self.sa_std_ = mean, std
        self._warn_flat_stats()

    def _state(self) -> dict[str, np.ndarray]:
        state = {}
        for i in range(self.classes_.size):
            state[f"ref_{i}"] = self.ref_[i]
            state[f"other_dist_{i}"] = self.other_dist_[i]
        return state

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        k = arrays["classes_"].size
        self.ref_ = [arrays[f"ref_{i}"] for i in range(k)]
        self.other_dist_ = [arrays[f"other_dist_{i}"] for i in range(k)]
        self.ref_sq_ = [np.einsum("ij,ij->i", r, r) for r in self.ref_]


def _logsumexp_neg_half_sq(a_aug: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """log sum_j exp(-||a_i - x_j||^2 / 2) float64 [m] from augmented rows [m, d + 2] and reference [d + 2, n].

    The exponents are <= 0 up to rounding, so float64 needs no max subtraction unless a row's sum underflows
    (a point far from every fitting trace); those rows are redone with the max taken out (exactly, no floor),
    so the result never underflows. float32 (whose exp underflows at -87) always takes the max out."""
    e = torch.mm(a_aug, ref)
    # exponents below the floor are raised to it: exp() of them would be subnormal (a ~50x slower path) and
    # adds at most n * exp(floor) to a sum that is either >= 1 (float32, max taken out) or >= 1e-250
    if e.dtype == torch.float64:
        tot = e.clamp_(min=-700.0).exp_().sum(1)
        far = tot < 1e-250  # far from every trace: subnormal or zero sums lose precision
        out = torch.log(tot)
        if bool(far.any()):
            out[far] = torch.logsumexp(torch.mm(a_aug[far], ref), dim=1)
        return out
    top = torch.amax(e, dim=1, keepdim=True)
    # float32 sum: torch's sum(dtype=float64) of float32 input is ~30x slower
    tot = e.sub_(top).clamp_(min=-80.0).exp_().sum(1)
    return top[:, 0].double() + torch.log(tot.double())


def _nearest(q: np.ndarray, ref: np.ndarray, chunk: int, ref_sq: np.ndarray | None = None,
             exclude_self: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Euclidean distance and index of the nearest row of ref float64 [n, d] for each row of q [m, d].
    exclude_self: q is ref (m == n >= 2) and row i may not pick itself (leave-one-out)."""
    if ref_sq is None:
        ref_sq = np.einsum("ij,ij->i", ref, ref)
    dist = np.empty(q.shape[0])
    idx = np.empty(q.shape[0], dtype=np.int64)
    chunk = max(1, min(chunk, 4_000_000 // max(ref.shape[0], 1)))  # keep the [chunk, n] block near 32 MB
    for s, e in _chunks(q.shape[0], chunk):
        block = q[s:e]
        sq = ref_sq[None, :] - 2.0 * (block @ ref.T)
        if exclude_self:
            sq[np.arange(e - s), np.arange(s, e)] = np.inf
        j = np.argmin(sq, axis=1)
        # exact distance to the chosen neighbour (the expanded form loses precision for close points)
        diff = block - ref[j]
        dist[s:e] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        idx[s:e] = j
    return dist, idx


ESTIMATORS: dict[str, type[SurpriseEstimator]] = {"mdsa": MDSA, "lsa": LSA, "dsa": DSA}


def make_estimator(kind: str, **params: Any) -> SurpriseEstimator:
    """Build an estimator by name ('mdsa', 'lsa', 'dsa') with constructor settings."""
    if kind not in ESTIMATORS:
        raise ValueError(f"kind: expected one of {sorted(ESTIMATORS)}, got {kind!r}")
    return ESTIMATORS[kind](**params)


def load_estimator(path: str | Path) -> SurpriseEstimator:
    """Read an estimator written by ``SurpriseEstimator.save``."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: expected an estimator .npz file, got {str(path)!r} (not found)")
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(str(arrays.pop("__meta__")))
    est = make_estimator(meta["kind"], **meta["params"])
    est.n_features_in_ = int(meta["n_features_in_"])
    est.skipped_classes_ = {int(k): v for k, v in meta["skipped_classes_"].items()}
    est.regularised_ = {int(k): v for k, v in meta["regularised_"].items()}
    est.classes_ = arrays["classes_"].astype(np.int64)
    est.kept_features_ = arrays["kept_features_"].astype(np.int64)
    est.sa_mean_, est.sa_std_ = arrays["sa_mean_"], arrays["sa_std_"]
    est._load_state(arrays)
    return est
