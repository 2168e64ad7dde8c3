"""Entropy and random baselines, and the shared sampler helpers."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from blindspots.mine.samplers.base import Sampler, top_n_indices
from blindspots.mine.samplers.entropy import EntropySampler
from blindspots.mine.samplers.mad import MADSampler
from blindspots.mine.samplers.random import RandomSampler


def table(n: int = 100, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "id": [f"p/{i}.png" for i in range(n)],
        "status": np.where(rng.random(n) < 0.1, "error", "ok"),
        "entropy__tgt": rng.random(n).astype(np.float32),
        "maxprob__tgt": rng.random(n).astype(np.float32),
        "entropy__g1": rng.random(n).astype(np.float32),
        "dpa__tgt__g1": rng.random(n).astype(np.float32),
    })
    df.loc[df["status"] == "error", ["entropy__tgt", "maxprob__tgt"]] = np.nan
    return df


def test_entropy_highest_first() -> None:
    t = table()
    res = EntropySampler("tgt").select(t, 10)
    ok = t[t["status"] == "ok"].sort_values("entropy__tgt", ascending=False)
    assert list(res["id"]) == list(ok["id"][:10])
    assert res["score"].is_monotonic_decreasing
    assert json.loads(res["reason"][0])["strategy"] == "entropy"
    assert len(EntropySampler().select(t)) == (t["status"] == "ok").sum()  # target inferred; n None = all
    lc = EntropySampler("tgt", column_prefix="maxprob").select(t, 5)
    assert list(lc["id"]) == list(t[t["status"] == "ok"].sort_values("maxprob__tgt")["id"][:5])


def test_random_same_seed_same_picks() -> None:
    t = table(500)
    a, b = RandomSampler().select(t, 50, seed=3), RandomSampler().select(t, 50, seed=3)
    pd.testing.assert_frame_equal(a, b)
    c = RandomSampler().select(t, 50, seed=4)
    assert list(a["id"]) != list(c["id"])
    assert a["id"].is_unique and set(a["id"]) <= set(t.loc[t["status"] == "ok", "id"])
    full = RandomSampler().select(t, seed=3)
    assert len(full) == (t["status"] == "ok").sum()
    assert list(full["id"][:50]) == list(a["id"])  # a prefix of the full permutation
    assert RandomSampler().select(t, 0).empty


def test_random_is_roughly_uniform() -> None:
    t = table(40)
    counts = pd.concat([RandomSampler().select(t, 5, seed=s)["id"] for s in range(150)]).value_counts()
    ok = (t["status"] == "ok").sum()
    assert len(counts) == ok
    assert counts.max() < 3.5 * counts.mean()


@pytest.mark.parametrize("sampler", [EntropySampler("tgt"), RandomSampler(), MADSampler("tgt", ranges=np.tile([0, 1], (1, 1)))])
def test_contract(sampler: Sampler) -> None:
    t = table()
    t["frac__tgt__0"] = np.float32(0.5)
    t["frac__g1__0"] = np.float32(0.5)
    res = sampler.select(t, 7, seed=1)
    assert list(res.columns[:3]) == ["id", "score", "reason"]
    assert len(res) <= 7 and res["id"].is_unique
    assert res.index.tolist() == list(range(len(res)))
    pd.testing.assert_frame_equal(res, sampler.select(t, 7, seed=1))
    assert isinstance(sampler.get_params(), dict)
    with pytest.raises(ValueError, match="n"):
        sampler.select(t, 2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="table"):
        sampler.select(t.drop(columns="id"))


def test_entropy_errors() -> None:
    with pytest.raises(ValueError, match="table"):
        EntropySampler("nope").select(table())
    with pytest.raises(ValueError, match="column_prefix"):
        EntropySampler("tgt", column_prefix="x").select(table())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, float("nan")]), min_size=0, max_size=50), st.integers(0, 60))
def test_top_n_matches_stable_sort(values: list[float], n: int) -> None:
    v = np.asarray(values, dtype=np.float64)
    got = top_n_indices(v, n)
    finite = [i for i in range(len(v)) if np.isfinite(v[i])]
    expected = sorted(finite, key=lambda i: (-v[i], i))[:n]
    assert got.tolist() == expected
