"""Distillation: DP-GMM scenarios from identified codes; scenario sampling."""
from __future__ import annotations

import numpy as np
import pytest

from blindspots.scenarios.clustering import Distiller, Scenarios, distill, scenario_responsibilities
from blindspots.defuse.identify import Identified
from blindspots.scenarios.sampling import sample_codes

CENTRES = np.array([[4.0, 0, 0, 0], [-4.0, 0, 0, 0], [0, 4.0, 0, 0]])


def blobs(n_per: int = 200, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([c + 0.3 * rng.standard_normal((n_per, 4)) for c in CENTRES]).astype(np.float32)


def test_finds_the_clusters_and_drops_light_components():
    d = Distiller(n_components=10, random_state=0).fit(blobs())
    sc = d.scenarios_
    assert 3 <= len(sc) <= 5
    assert (sc.weights > 0.01).all() and sc.covariances.shape == (len(sc), 4, 4)
    for c in CENTRES:  # every true cluster has a kept component near it
        assert np.linalg.norm(sc.means - c, axis=1).min() < 0.5
    heavy = sc.weights > 0.15
    assert heavy.sum() == 3
    assert {"seconds", "converged", "n_iter", "lower_bound", "n_codes"} <= set(sc.fit)
    p = d.predict_proba(blobs(5, seed=1))
    assert p.shape == (15, len(sc))


def test_downsampling_and_determinism(tmp_path):
    codes = blobs(400)
    a = Distiller(n_components=8, max_codes=300, random_state=1).fit(codes).scenarios_
    b = Distiller(n_components=8, max_codes=300, random_state=1).fit(codes).scenarios_
    assert a.fit["n_codes"] == 300
    np.testing.assert_array_equal(a.means, b.means)
    back = Scenarios.load(a.save(tmp_path / "s.npz"))
    np.testing.assert_array_equal(back.covariances, a.covariances)
    assert back.fit == a.fit


def test_identified_input_and_errors():
    codes = blobs(50)
    ident = Identified(codes, np.ones(len(codes), np.float32), np.arange(len(codes)), np.zeros(len(codes), int),
                       np.ones(len(codes), int))
    assert len(distill(ident, n_components=5)) >= 1
    with pytest.raises(ValueError, match="codes: expected latent codes"):
        Distiller().fit(np.zeros(5))
    with pytest.raises(ValueError, match="at least 2 identified failures"):
        Distiller().fit(np.zeros((1, 4)))
    with pytest.raises(ValueError, match="weight_threshold"):
        Distiller(weight_threshold=2).fit(codes)


def test_responsibilities_and_sampling():
    sc = Distiller(n_components=6, random_state=0).fit(blobs()).scenarios_
    r = scenario_responsibilities(sc, CENTRES)
    np.testing.assert_allclose(r.sum(1), 1.0)
    assert len(set(r.argmax(1))) == 3
    codes, which = sample_codes(sc.means, sc.covariances, 50, tau=0.5, seed=3)
    assert codes.shape == (50 * len(sc), 4) and codes.dtype == np.float32
    assert np.array_equal(which, np.repeat(np.arange(len(sc)), 50))
    again, _ = sample_codes(sc.means, sc.covariances, 50, tau=0.5, seed=3)
    np.testing.assert_array_equal(codes, again)
    # A subset of scenarios gets exactly the same draws (per-scenario random streams).
    one, w1 = sample_codes(sc.means, sc.covariances, 50, tau=0.5, seed=3, which=[1])
    np.testing.assert_array_equal(one, codes[50:100])
    # τ scales the spread: sample covariance ≈ τ·Σ.
    big, _ = sample_codes(sc.means, sc.covariances, 4000, tau=0.5, seed=0, which=[0])
    np.testing.assert_allclose(np.cov(big.T), 0.5 * sc.covariances[0], atol=0.02)
    with pytest.raises(ValueError, match="tau"):
        sample_codes(sc.means, sc.covariances, 5, tau=0)
    with pytest.raises(ValueError, match="which"):
        sample_codes(sc.means, sc.covariances, 5, which=[99])
