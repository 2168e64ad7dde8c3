"""MDSA, LSA and DSA against reference computations, and their degenerate inputs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.stats import gaussian_kde

from blindspots.surprise.estimators import DSA, LSA, MDSA, load_estimator, make_estimator


def data(n=400, d=5, k=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    x[:, 1] += 0.8 * x[:, 0]
    y = rng.integers(0, k, n)
    x += y[:, None] * 0.7
    q = rng.normal(size=(40, d)) * 1.5
    qc = rng.integers(0, k, 40)
    return x, y, q, qc


def test_lsa_equals_scipy_gaussian_kde():
    x, y, q, qc = data()
    got = LSA().fit(x, y).score(q, qc)
    ref = np.array([-gaussian_kde(x[y == c].T).logpdf(p[:, None])[0] for p, c in zip(q, qc)])
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_lsa_drops_union_of_low_variance_neurons_like_kim():
    x, y, q, qc = data(d=6)
    x[y == 0, 2] = 1.0  # constant in class 0 only -> dropped for every class
    x[:, 5] = 3.0       # constant everywhere
    est = LSA().fit(x, y)
    assert est.kept_features_.tolist() == [0, 1, 3, 4]
    keep = [0, 1, 3, 4]
    ref = np.array([-gaussian_kde(x[y == c][:, keep].T).logpdf(p[keep, None])[0] for p, c in zip(q, qc)])
    np.testing.assert_allclose(est.score(q, qc), ref, rtol=1e-6)


def test_lsa_far_points_do_not_underflow():
    x, y, _, _ = data()
    far = np.full((2, 5), 1e3)
    sa = LSA().fit(x, y).score(far, [0, 1])
    assert np.all(np.isfinite(sa)) and np.all(sa > 1e4)  # scipy's pdf is 0 here; -log in log space is finite


def test_mdsa_equals_direct_formula():
    x, y, q, qc = data()
    got = MDSA().fit(x, y).score(q, qc)
    ref = []
    for p, c in zip(q, qc):
        xc = x[y == c]
        delta = p - xc.mean(axis=0)
        ref.append(np.sqrt(delta @ np.linalg.inv(np.cov(xc, rowvar=False)) @ delta))
    np.testing.assert_allclose(got, ref, rtol=1e-4)


def test_dsa_equals_kim_definition():
    x, y, q, qc = data(n=150)
    got = DSA().fit(x, y).score(q, qc)
    for p, c, g in zip(q, qc, got):
        same, other = x[y == c], x[y != c]
        da = np.linalg.norm(same - p, axis=1)
        xa = same[np.argmin(da)]
        db = np.linalg.norm(other - xa, axis=1).min()
        assert g == pytest.approx(da.min() / db, rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.floats(-50, 50), scale=st.floats(0.1, 10))
def test_mdsa_invariant_to_affine_maps_and_lsa_shift_invariant(seed, shift, scale):
    x, y, q, qc = data(n=200, d=4, seed=seed)
    m = MDSA().fit(x, y).score(q, qc)
    m2 = MDSA().fit(x * scale + shift, y).score(q * scale + shift, qc)
    np.testing.assert_allclose(m, m2, rtol=1e-3, atol=1e-3)
    s = LSA().fit(x, y).score(q, qc)
    s2 = LSA().fit(x + shift, y).score(q + shift, qc)
    np.testing.assert_allclose(s, s2, rtol=1e-6, atol=1e-6)
    assert np.all(m >= 0)


@pytest.mark.parametrize("kind", ["mdsa", "lsa", "dsa"])
def test_nan_features_raise(kind):
    x, y, q, qc = data()
    bad = x.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="traces: expected finite"):
        make_estimator(kind).fit(bad, y)
    est = make_estimator(kind).fit(x, y)
    q[0, 0] = np.inf
    with pytest.raises(ValueError, match="traces: expected finite"):
        est.score(q, qc)


@pytest.mark.parametrize("kind", ["mdsa", "lsa"])
def test_class_with_one_trace_is_skipped_with_clear_error(kind):
    x, y, q, qc = data()
    y = y.copy()
    y[0] = 7  # a class with a single trace
    est = make_estimator(kind).fit(x, y)
    assert 7 in est.skipped_classes_ and 7 not in est.classes_
    with pytest.raises(ValueError, match="classes: expected ids of modelled classes"):
        est.score(q[:1], [7])
    assert np.isfinite(est.score(q, qc)).all()


@pytest.mark.parametrize("kind", ["mdsa", "lsa", "dsa"])
def test_d_larger_than_n_and_constant_features_never_nan(kind):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(12, 30))   # d = 30 > 6 traces per class
    x[:, 4] = 2.0                   # a constant feature
    x[:, 5] = x[:, 6] * 2           # collinear features
    y = np.repeat([0, 1], 6)
    est = make_estimator(kind).fit(x, y)
    sa = est.score(rng.normal(size=(20, 30)), rng.integers(0, 2, 20))
    assert np.isfinite(sa).all()
    if kind != "dsa":
        assert est.regularised_  # the fallback was used and recorded


def test_all_constant_features_raise():
    x = np.ones((20, 3))
    with pytest.raises(ValueError, match="var_threshold"):
        MDSA().fit(x, np.repeat([0, 1], 10))


def test_dsa_needs_two_classes_and_duplicates_stay_finite():
    x, _, q, _ = data()
    with pytest.raises(ValueError, match="two classes"):
        DSA().fit(x, np.zeros(len(x), dtype=int))
    x2 = np.vstack([x[:5], x[:5]])
    sa = DSA().fit(x2, np.repeat([0, 1], 5)).score(q, np.zeros(len(q), dtype=int))
    assert np.isfinite(sa).all()


def test_bad_arguments():
    x, y, q, qc = data()
    with pytest.raises(ValueError, match="traces: expected a 2-D"):
        MDSA().fit(x[0], y)
    with pytest.raises(ValueError, match="labels: expected an integer array"):
        MDSA().fit(x, y[:-1])
    with pytest.raises(ValueError, match="fitted"):
        MDSA().score(q, qc)
    with pytest.raises(ValueError, match="features per trace"):
        MDSA().fit(x, y).score(q[:, :3], qc)
    with pytest.raises(ValueError, match="reg"):
        MDSA(reg=0).fit(x, y)
    with pytest.raises(ValueError, match="kind"):
        make_estimator("xsa")


@pytest.mark.parametrize("kind", ["mdsa", "lsa", "dsa"])
def test_save_load_roundtrip(tmp_path, kind):
    x, y, q, qc = data()
    est = make_estimator(kind).fit(x, y)
    back = load_estimator(est.save(tmp_path / f"{kind}.npz"))
    np.testing.assert_allclose(back.score(q, qc), est.score(q, qc), rtol=1e-12)
    np.testing.assert_allclose(back.sa_mean_, est.sa_mean_)


def test_fitting_statistics_are_the_class_sa_of_fitting_traces():
    x, y, _, _ = data()
    est = MDSA().fit(x, y)
    for i, c in enumerate(est.classes_):
        sa = est.score(x[y == c], c)
        assert est.sa_mean_[i] == pytest.approx(sa.mean())
        assert est.sa_std_[i] == pytest.approx(sa.std())


def test_lsa_float32_mode_is_close_to_scipy():
    x, y, q, qc = data(d=8)
    x = x + 100.0  # a large offset: centring keeps float32 accurate
    q = q + 100.0
    got = LSA(dtype="float32").fit(x, y).score(q, qc)
    ref = np.array([-gaussian_kde(x[y == c].T).logpdf(p[:, None])[0] for p, c in zip(q, qc)])
    np.testing.assert_allclose(got, ref, rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 8), d=st.integers(1, 12), kind=st.sampled_from(["mdsa", "lsa", "dsa"]),
       const=st.integers(0, 12), scale=st.sampled_from([1e-3, 1.0, 1e4]))
def test_degenerate_inputs_give_finite_scores_or_clear_errors(seed, n, d, kind, const, scale):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2 * n, d)) * scale
    x[:, :min(const, d)] = 1.5                   # some constant features
    y = np.repeat([0, 1], n)
    try:
        est = make_estimator(kind).fit(x, y)
    except ValueError as e:
        assert any(w in str(e) for w in ("var_threshold", "labels:", "two classes"))
        return
    q = rng.normal(size=(5, d)) * scale
    sa = est.score(q, est.classes_[rng.integers(0, est.classes_.size, 5)])
    assert np.isfinite(sa).all() and (sa >= 0).all() | (kind == "lsa")


def test_mdsa_blocks_sorting_and_input_dtypes_do_not_change_values(monkeypatch):
    import blindspots.surprise.estimators as E

    x, y, q, qc = data(n=600, d=6, k=4)
    est = MDSA(chunk_size=7).fit(x, y)  # chunks of 7 rows inside each class's sorted run
    ref = np.array([est.score(p[None], c)[0] for p, c in zip(q, qc)])  # one trace at a time
    monkeypatch.setattr(E, "MDSA_BLOCK_ROWS", 3)  # torch row blocks smaller than a chunk
    np.testing.assert_allclose(est.score(q, qc), ref, rtol=1e-6)
    np.testing.assert_allclose(est.score(q.astype(np.float32), qc), ref, rtol=1e-5)
    frozen = q.copy()
    frozen.flags.writeable = False  # read-only inputs (np.load mmap) are scored, not refused
    np.testing.assert_allclose(est.score(frozen, qc), ref, rtol=1e-6)
    np.testing.assert_allclose(est.score(q[::-1], qc[::-1])[::-1], ref, rtol=1e-6)  # order-independent


def test_huge_finite_traces_pass_the_cheap_finite_screen():
    from blindspots._validation import check_traces

    big = np.full((4, 3), 3e38, dtype=np.float32)  # the total overflows to inf, yet every entry is finite
    assert check_traces(big) is not None
    bad = big.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="1 NaN/inf entries in 1 traces"):
        check_traces(bad)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_lsa_blocks_mixing_near_and_far_points_equal_scipy(dtype):
    x, y, q, qc = data(d=4)
    q = q.copy()
    q[::3] += 40.0  # every third point far from all traces: exp() of all its exponents underflows
    got = LSA(dtype=dtype).fit(x, y).score(q, qc)
    ref = np.array([-gaussian_kde(x[y == c].T).logpdf(p[:, None])[0] for p, c in zip(q, qc)])  # log space
    assert (ref[::3] > 1000).all() and (ref[1::3] < 100).all()  # far rows take the max-subtracted redo
    np.testing.assert_allclose(got, ref, rtol=1e-9 if dtype == "float64" else 1e-5)


def test_lsa_refit_does_not_reuse_cached_reference():
    x, y, q, qc = data()
    est = LSA().fit(x, y)
    first = est.score(q, qc)
    est.fit(x * 2.0, y)
    np.testing.assert_allclose(est.score(q, qc), LSA().fit(x * 2.0, y).score(q, qc), rtol=1e-12)
    assert not np.allclose(est.score(q, qc), first)


def test_mdsa_split_over_threads_equals_one_thread(monkeypatch):
    """Rows split over Python threads (torch at 2 threads) give the one-thread values; the thread count
    is restored after the call."""
    import torch

    import blindspots.surprise.estimators as E

    x, y, q, qc = data(n=600, d=6, k=4)
    est = MDSA().fit(x, y)
    q = np.tile(q, (40, 1))
    qc = np.tile(qc, 40)
    old = torch.get_num_threads()
    ref = est.score(q, qc)
    monkeypatch.setattr(E, "MDSA_BLOCK_ROWS", 16)  # several blocks per part at a tiny size
    try:
        torch.set_num_threads(2)
        split = est.score(q, qc)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(old)
    np.testing.assert_allclose(split, ref, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_mdsa_deferred_finite_screen_still_raises(dtype, value):
    """MDSA screens the traces through its scores (not before): NaN / inf anywhere still raise the same
    error, for one class and for mixed classes; huge finite values give inf as before, no error."""
    x, y, q, qc = data()
    est = MDSA().fit(x, y)
    for row in (1, 39):
        bad = q.astype(dtype)
        bad[row, 2] = value
        for classes in (int(y[0]), qc):
            with pytest.raises(ValueError, match="traces: expected finite"):
                est.score(bad, classes)
    huge = q.copy()
    huge[5, 1] = 1e300
    sa = est.score(huge, qc)
    assert np.isinf(sa[5]) and np.isfinite(np.delete(sa, 5)).all()


def test_dsa_fit_statistics_are_leave_one_out():
    """Scored against its own fitting set every trace was its own nearest neighbour (DSA 0, std 0), so the
    z-scores of image and group SA came out near 1e12; the statistics now leave each trace out."""
    x, y, q, qc = data()
    est = DSA().fit(x, y)
    for i, c in enumerate(est.classes_):
        xc, xo = x[y == c].astype(np.float64), x[y != c].astype(np.float64)
        d_in = np.linalg.norm(xc[:, None] - xc[None], axis=2)
        np.fill_diagonal(d_in, np.inf)
        a = d_in.argmin(axis=1)
        other = np.linalg.norm(xc[:, None] - xo[None], axis=2).min(axis=1)
        ref = d_in.min(axis=1) / other[a]
        np.testing.assert_allclose(est.sa_mean_[i], ref.mean(), rtol=1e-9)
        np.testing.assert_allclose(est.sa_std_[i], ref.std(), rtol=1e-9)
    z = (est.score(q, qc) - est.sa_mean_[np.searchsorted(est.classes_, qc)]) / est.sa_std_[
        np.searchsorted(est.classes_, qc)]
    assert np.abs(z).max() < 100


def test_constant_fitting_sa_is_a_warning(caplog):
    """One feature vector per image repeated over its pixels: 6 distinct traces in 9-D give every fitting
    trace the same MDSA (std ~1e-6), and image SA z-scores of ~1e6 came without a word."""
    rng = np.random.default_rng(0)
    x = np.repeat(rng.normal(size=(12, 9)), 20, axis=0)
    y = np.repeat(np.arange(12) % 2, 20)
    with caplog.at_level("WARNING", logger="blindspots.surprise.estimators"):
        MDSA().fit(x, y)
    assert any("nearly) constant" in r.getMessage() for r in caplog.records)
    caplog.clear()
    x2, y2, _, _ = data()
    with caplog.at_level("WARNING", logger="blindspots.surprise.estimators"):
        MDSA().fit(x2, y2)
        DSA().fit(x2, y2)
    assert not any("constant" in r.getMessage() for r in caplog.records)


def test_split_thread_pool_is_replaced_not_leaked_when_it_grows():
    """A larger split replaces the worker pool and shuts the old one down (its threads used to stay)."""
    import threading

    from blindspots.surprise import _threads

    seen: list[int] = []
    _threads.run_split(8, 2, lambda lo, hi: seen.append(hi - lo))
    small = _threads._POOL
    _threads.run_split(9, 3, lambda lo, hi: seen.append(hi - lo))
    assert _threads._POOL is not small and small._shutdown
    assert sum(seen) == 17
    names = [t.name for t in threading.enumerate() if t.name.startswith("blindspots-surprise")]
    assert len(names) <= 3 + 2  # the new pool's threads, and at most the old pool's exiting ones
