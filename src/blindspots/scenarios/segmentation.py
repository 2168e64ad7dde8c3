"""Failure scenarios for segmentation: group confirmed failures into a few nameable failure modes.

Input: a feature table of the pool (one row per image id: simple attributes from
`segmentation_attributes`, or any numeric columns), the ids of the confirmed failures (lowest-MOS
images, low IoU on S and T) and optionally the target's pooled activations [N, D] for the same rows.
Every column is standardised on the pool (activations first reduced to a few principal
components), the failures' rows are clustered with Defuse's DP-GMM (`scenarios.clustering.Distiller`,
spherical covariances: there are few failures per dimension) on the columns where the failures stand
out from the pool, and each scenario is described like
slice-discovery tools describe slices: by the attributes with the largest standardized mean
difference (Cohen's d) between its failures and the rest of the pool, and by its most typical
images (highest responsibility). `SegmentationScenarios.nearest` ranks pool images by how well a
scenario explains them (the `scenario` sampler, `mine/samplers/scenario.py`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.stats import multivariate_normal
from sklearn.decomposition import PCA

from blindspots.scenarios.clustering import Distiller, Scenarios, scenario_responsibilities

log = logging.getLogger(__name__)

ACT_PREFIX = "activation_pc"


@dataclass
class ScenarioSummary:
    """One scenario: its failures, what sets it apart, its most typical images.

    index: position in `SegmentationScenarios.summaries`; members: failure ids in it; effects:
    DataFrame (attribute, d, scenario_mean, pool_mean) sorted by |d| descending; typical: the
    members with the highest responsibility, best first; description: one line of text.
    """

    index: int
    members: list[str]
    effects: pd.DataFrame
    typical: list[str]
    description: str


@dataclass
class SegmentationScenarios:
    """Scenarios found among confirmed failures (in the standardised feature space).

    columns: the feature names used (attributes, then activation PCs); center, scale: float64 [F]
    standardisation on the pool; pca_mean float64 [D], pca_components float64 [P, D] (empty without
    activations); mixture: the kept DP-GMM components; failures: ids clustered; labels: int64 [M]
    scenario of each failure (index into summaries); summaries: one per scenario, largest first;
    order: int64 [J] mixture component of each summary; used: bool [F] the columns clustered on.
    """

    columns: list[str]
    center: np.ndarray
    scale: np.ndarray
    pca_mean: np.ndarray
    pca_components: np.ndarray
    mixture: Scenarios
    failures: list[str]
    labels: np.ndarray
    summaries: list[ScenarioSummary] = field(default_factory=list)
    order: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # summary j -> mixture component
    used: np.ndarray | None = None  # bool [F]: the columns the mixture was fitted on (None: all)

    def _space(self, features: pd.DataFrame, activations: np.ndarray | None) -> np.ndarray:
        z = self.transform(features, activations)
        return z if self.used is None else z[:, self.used]

    def __len__(self) -> int:
        return len(self.summaries)

    def transform(self, features: pd.DataFrame, activations: np.ndarray | None = None) -> np.ndarray:
        """Standardised features float64 [N, F] of `features` (the same attribute columns) and, when the
        scenarios used them, `activations` float [N, D] in the same row order."""
        attrs = [c for c in self.columns if not c.startswith(ACT_PREFIX)]
        missing = [c for c in attrs if c not in features.columns]
        if missing:
            raise ValueError(f"features: expected columns {missing}, got {list(features.columns)[:12]}")
        x = features[attrs].to_numpy(np.float64, na_value=np.nan)
        if len(self.pca_components):
            if activations is None:
                raise ValueError("activations: expected the pooled activations [N, D] the scenarios were found "
                                 "with, got None")
            a = _check_activations(activations, len(features), self.pca_mean.shape[0])
            x = np.concatenate([x, (a - self.pca_mean) @ self.pca_components.T], axis=1)
        z = (x - self.center) / self.scale
        return np.where(np.isfinite(z), z, 0.0)  # a missing attribute counts as the pool mean

    def responsibilities(self, features: pd.DataFrame, activations: np.ndarray | None = None) -> np.ndarray:
        """float64 [N, J]: posterior of each scenario (summary order) for each row of `features`."""
        p = scenario_responsibilities(self.mixture, self._space(features, activations))
        return p[:, self.order]

    def log_density(self, features: pd.DataFrame, activations: np.ndarray | None = None) -> np.ndarray:
        """float64 [N, J]: log density of each row under each scenario's Gaussian (summary order):
        how close a pool image is to a scenario, comparable across images."""
        z = self._space(features, activations)
        m = self.mixture
        return np.stack([multivariate_normal(m.means[j], m.covariances[j], allow_singular=True).logpdf(z).reshape(-1)
                         for j in self.order], axis=1).reshape(len(z), len(self.order))

    def log_ratio(self, features: pd.DataFrame, activations: np.ndarray | None = None) -> np.ndarray:
        """float64 [N, J]: log p(x | scenario j) - log p(x | pool), the pool being the standard normal of
        the standardised space: how much better scenario j explains a row than the pool at large does.
        Ranking by this (not by the density alone) keeps a broad scenario from pulling typical images."""
        z = self._space(features, activations)
        pool = multivariate_normal(np.zeros(z.shape[1]), np.eye(z.shape[1])).logpdf(z).reshape(-1)
        return self.log_density(features, activations) - pool[:, None]

    def to_frame(self) -> pd.DataFrame:
        """One row per scenario: scenario, size, description, typical (comma-separated ids)."""
        return pd.DataFrame([{"scenario": s.index, "size": len(s.members), "description": s.description,
                              "typical": ", ".join(s.typical)} for s in self.summaries])


def _check_activations(activations: np.ndarray, n: int, d: int | None = None) -> np.ndarray:
    a = np.asarray(activations, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != n or (d is not None and a.shape[1] != d):
        want = f"[{n}, {d if d is not None else 'D'}]"
        raise ValueError(f"activations: expected pooled activations {want} (one row per feature row), got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("activations: expected finite values, got NaN/inf")
    return a


def cohens_d(inside: np.ndarray, outside: np.ndarray) -> np.ndarray:
    """Standardized mean difference per column: (mean_in - mean_out) / pooled sd.

    inside float [A, F], outside float [B, F] (NaN ignored). Columns with no spread give 0.
    """
    mi, mo = np.nanmean(inside, axis=0), np.nanmean(outside, axis=0)
    vi, vo = np.nanvar(inside, axis=0, ddof=1) if len(inside) > 1 else np.zeros(inside.shape[1]), \
        np.nanvar(outside, axis=0, ddof=1) if len(outside) > 1 else np.zeros(outside.shape[1])
    na, nb = max(len(inside) - 1, 0), max(len(outside) - 1, 0)
    pooled = np.sqrt((na * vi + nb * vo) / max(na + nb, 1))
    return np.where(pooled > 1e-12, (mi - mo) / np.where(pooled > 1e-12, pooled, 1.0), 0.0)


def _describe(effects: pd.DataFrame, n_terms: int, min_d: float) -> str:
    terms = []
    for row in effects.head(n_terms).itertuples(index=False):
        if abs(row.d) < min_d:
            break
        terms.append(f"{row.attribute} {'high' if row.d > 0 else 'low'} (d={row.d:+.1f})")
    return "; ".join(terms) if terms else "no attribute sets it apart (d below %.1f)" % min_d


def find_scenarios(features: pd.DataFrame, failures: Sequence[str], *, activations: np.ndarray | None = None,
                   n_activation_dims: int = 8, max_scenarios: int = 10, weight_threshold: float = 0.01,
                   covariance_type: str = "spherical", select_moment: float = 1.15, n_typical: int = 6, n_terms: int = 3, min_d: float = 0.5,
                   random_state: int = 0) -> SegmentationScenarios:
    """Group confirmed failures into scenarios and describe each.

    features: the pool's feature table, index = image id (the failures included), numeric columns
        (e.g. `scan_attributes`); columns with no spread in the pool are dropped.
    failures: ids of the confirmed failures (a subset of features.index; at least 2).
    activations: optional float [N, D], the target's pooled activations for features' rows in
        order; reduced to `n_activation_dims` principal components fitted on the pool.
    max_scenarios: DP-GMM truncation K (at most the number of failures); weight_threshold: a
        component is a scenario when its weight exceeds it (Defuse's ε, the paper's 0.01). Why not
        larger: with a few dozen failures a real failure mode of 5-10 of them weighs under 0.1, and
        a dropped component's failures go to the broadest kept one (on the procedural scenes
        ε = 0.1 merged the two directions of a hue rotation into one scenario in most round-1 draws).
    select_moment: cluster on the columns whose second moment over the failures (standardised on the
        pool, where it is 1) reaches this: the failures stand out there; descriptions use every column.
    n_typical: typical images per scenario; n_terms, min_d: the description names up to n_terms
        attributes with |d| >= min_d.
    """
    if not isinstance(features, pd.DataFrame) or features.empty:
        raise ValueError(f"features: expected a non-empty DataFrame indexed by image id, got {type(features).__name__}")
    if features.index.has_duplicates:
        raise ValueError("features: expected one row per image id, got duplicated ids in the index")
    index = pd.Index(features.index.astype(str))
    fails = [str(i) for i in failures]
    if len(set(fails)) != len(fails):
        raise ValueError("failures: expected distinct image ids, got duplicates")
    unknown = [i for i in fails if i not in index]
    if unknown:
        raise ValueError(f"failures: expected ids of rows of features, got {len(unknown)} others (first {unknown[0]!r})")
    if len(fails) < 2:
        raise ValueError(f"failures: expected at least 2 confirmed failures, got {len(fails)}")
    num = features.select_dtypes(include=[np.number])
    if num.shape[1] == 0 and activations is None:
        raise ValueError(f"features: expected numeric columns, got {list(features.columns)}")
    x = num.to_numpy(np.float64, na_value=np.nan)
    cols = [str(c) for c in num.columns]
    pca_mean, pca_comp = np.zeros(0), np.zeros((0, 0))
    if activations is not None:
        a = _check_activations(activations, len(features))
        k = max(1, min(int(n_activation_dims), a.shape[1], len(a)))
        pca = PCA(n_components=k, random_state=random_state).fit(a)
        pca_mean, pca_comp = pca.mean_.astype(np.float64), pca.components_.astype(np.float64)
        x = np.concatenate([x, (a - pca_mean) @ pca_comp.T], axis=1)
        cols += [f"{ACT_PREFIX}{j + 1}" for j in range(k)]
    center, scale = np.nanmean(x, axis=0), np.nanstd(x, axis=0)
    keep = np.isfinite(scale) & (scale > 1e-12)
    if not keep.any():
        raise ValueError("features: expected some column that varies over the pool, got none")
    x, cols, center, scale = x[:, keep], [c for c, k_ in zip(cols, keep) if k_], center[keep], scale[keep]
    z = np.where(np.isfinite((x - center) / scale), (x - center) / scale, 0.0)
    rows = index.get_indexer(fails)
    # Cluster on the columns where the failures stand out from the pool (a shifted mean, or a
    # spread wider than the pool's: failures of several kinds pull one column both ways); the
    # other columns only add noise that splits one failure mode into several components.
    informative = (z[rows] ** 2).mean(axis=0) >= select_moment  # mean^2 + var; the pool's is 1
    if not informative.any():
        informative = np.ones(len(cols), dtype=bool)
    dist = Distiller(n_components=min(int(max_scenarios), len(fails)), covariance_type=covariance_type,
                     weight_threshold=weight_threshold, max_codes=None, random_state=random_state).fit(z[rows][:, informative])
    mixture = dist.scenarios_
    if mixture is None or len(mixture) == 0:  # every weight below the threshold: one scenario of all
        dist = Distiller(n_components=1, covariance_type=covariance_type, weight_threshold=0.0, max_codes=None,
                         random_state=random_state).fit(z[rows][:, informative])
        mixture = dist.scenarios_
    resp = dist.predict_proba(z[rows][:, informative])  # [M, J] over kept components
    comp = resp.argmax(axis=1)
    sizes = np.bincount(comp, minlength=len(mixture))
    order = np.array([j for j in np.argsort(-sizes, kind="stable") if sizes[j] > 0], dtype=np.int64)
    rank = {int(j): r for r, j in enumerate(order)}
    labels = np.array([rank[int(c)] for c in comp], dtype=np.int64)
    result = SegmentationScenarios(cols, center, scale, pca_mean, pca_comp, mixture, fails, labels, order=order,
                                   used=informative)
    x_raw = x  # unstandardised, for readable means
    for r, j in enumerate(order):
        inside = labels == r
        member_rows = rows[inside]
        rest = np.setdiff1d(np.arange(len(index)), member_rows)
        d = cohens_d(x_raw[member_rows], x_raw[rest])
        eff = pd.DataFrame({"attribute": cols, "d": d, "scenario_mean": np.nanmean(x_raw[member_rows], axis=0),
                            "pool_mean": np.nanmean(x_raw[rest], axis=0) if len(rest) else np.nan})
        eff = eff.reindex(eff["d"].abs().sort_values(ascending=False, kind="stable").index).reset_index(drop=True)
        typical_order = np.argsort(-resp[inside, j], kind="stable")[:n_typical]
        members = [fails[i] for i in np.flatnonzero(inside)]
        result.summaries.append(ScenarioSummary(r, members, eff, [members[i] for i in typical_order],
                                                _describe(eff, n_terms, min_d)))
    log.info("find_scenarios: %d failures -> %d scenarios", len(fails), len(result))
    return result
