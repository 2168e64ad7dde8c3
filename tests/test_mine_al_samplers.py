"""Active-learning baselines and MAD+ over the score table: interface, determinism per seed, exact
core-set distances, margin/BALD order, MAD+'s shared part."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from blindspots.config import STRATEGIES
from blindspots.mine import k_center_greedy, make_sampler, needs_model, sampler_names
from blindspots.mine.reasons import describe

NEW = ("madplus", "margin", "bald", "powerbald", "coreset", "badge")


def al_table(n: int = 60, seed: int = 0, dim: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = pd.DataFrame({"id": [f"img_{i:03d}.png" for i in range(n)], "status": "ok",
                      "al_margin__t": rng.random(n).astype(np.float32),
                      "al_bald__t": rng.random(n).astype(np.float32),
                      **{f"al_feat__t__{j}": rng.normal(size=n).astype(np.float32) for j in range(dim)},
                      **{f"al_badge__t__{j}": rng.normal(size=n).astype(np.float32) for j in range(2 * dim)},
                      "entropy__t": rng.random(n).astype(np.float32), "entropy__g": rng.random(n).astype(np.float32),
                      "dpa__t__g": rng.random(n), "frac__t__0": rng.uniform(0.1, 0.9, n).astype(np.float32),
                      "frac__g__0": rng.uniform(0.1, 0.9, n).astype(np.float32)})
    t.loc[3, "status"] = "error"
    return t


def settings(name: str) -> dict:
    return {"madplus": {"target": "t", "ranges": [[0.0, 1.0]], "n3": 10}}.get(name, {"target": "t"})


def test_registry_and_project_strategies_hold_the_baselines():
    assert set(NEW) <= set(sampler_names()) and tuple(STRATEGIES) == sampler_names()
    assert needs_model("bald") == ("bald",) and needs_model("coreset") == ("features",) and needs_model("mad") == ()
    assert needs_model("badge") == ("badge",)


@pytest.mark.parametrize("name", NEW)
def test_interface(name):
    t = al_table()
    res = make_sampler(name, **settings(name)).select(t, 12, seed=0)
    assert list(res.columns[:3]) == ["id", "score", "reason"] and len(res) == 12 and res["id"].is_unique
    assert "img_003.png" not in set(res["id"])  # status error never picked
    assert list(res.index) == list(range(12))
    for r in res["reason"]:
        assert isinstance(json.loads(r), dict) and describe(r) != r
    every = make_sampler(name, **settings(name)).select(t, None, seed=0)
    assert len(every) >= 10  # every usable row, or (MAD+) its natural size
    with pytest.raises(ValueError, match="n: expected"):
        make_sampler(name, **settings(name)).select(t, -1)


@pytest.mark.parametrize("name", NEW)
def test_same_seed_same_picks(name):
    t = al_table()
    a = make_sampler(name, **settings(name)).select(t, 10, seed=3)
    b = make_sampler(name, **settings(name)).select(t, 10, seed=3)
    pd.testing.assert_frame_equal(a, b)


def test_powerbald_draws_by_seed_and_favours_high_bald():
    t = al_table(400)
    picks = [set(make_sampler("powerbald", target="t").select(t, 40, seed=s)["id"]) for s in range(3)]
    assert picks[0] != picks[1] != picks[2]
    bald = t.set_index("id")["al_bald__t"]
    # drawn with probability ~ BALD: the picks' mean BALD is above the pool's (0.5), below top-k's
    top = make_sampler("bald", target="t").select(t, 40)
    assert bald.mean() + 0.05 < np.mean([bald[list(p)].mean() for p in picks]) < top["score"].mean()
    # a huge beta is top-k BALD
    huge = make_sampler("powerbald", target="t", beta=1e6).select(t, 40, seed=0)
    assert list(huge["id"]) == list(top["id"])
    with pytest.raises(ValueError, match="beta: expected a positive number"):
        make_sampler("powerbald", beta=0).select(t, 3)


def test_margin_and_bald_rank_exactly():
    t = al_table()
    ok = t[t["status"] == "ok"]
    m = make_sampler("margin", target="t").select(t, 10)
    assert list(m["id"]) == list(ok.sort_values("al_margin__t", kind="stable")["id"][:10])
    np.testing.assert_allclose(m["score"], 1 - ok.sort_values("al_margin__t")["al_margin__t"][:10], rtol=1e-6)
    b = make_sampler("bald", target="t").select(t, 10)
    assert list(b["id"]) == list(ok.sort_values("al_bald__t", ascending=False, kind="stable")["id"][:10])


def test_k_center_greedy_distances_exact_on_a_line():
    x = np.array([[0.0], [1.0], [3.0], [7.0], [7.5]])
    picks, d = k_center_greedy(x, 3, centers=np.array([[0.0]]))
    assert picks.tolist() == [4, 2, 1]  # 7.5 (7.5 away), then 3 (3 from 0), then 1 (1 from 0)
    np.testing.assert_allclose(d, [7.5, 3.0, 1.0])
    picks, d = k_center_greedy(x, 2, first=2)
    assert picks.tolist() == [2, 4] and np.isinf(d[0]) and d[1] == 4.5


def test_k_center_greedy_matches_brute_force():
    rng = np.random.default_rng(5)
    x, c = rng.normal(size=(40, 4)), rng.normal(size=(3, 4))
    picks, d = k_center_greedy(x, 10, c)
    chosen = list(c)
    for p, dist in zip(picks, d):
        brute = [min(np.linalg.norm(xi - cj) for cj in chosen) for xi in x]
        brute = [-1 if i in picks[:len(chosen) - 3] else v for i, v in enumerate(brute)]
        assert p == int(np.argmax(brute)) and dist == pytest.approx(max(brute), rel=1e-9)
        chosen.append(x[p])


def test_coreset_sampler_uses_labelled_ids_and_centres():
    t = al_table(30, dim=2)
    feats = t[["al_feat__t__0", "al_feat__t__1"]].to_numpy(np.float64)
    lab = ["img_000.png", "img_001.png"]
    res = make_sampler("coreset", target="t", labelled=lab, centers=np.zeros((1, 2))).select(t, 5)
    assert not set(lab) & set(res["id"])
    ok = (t["status"] == "ok").to_numpy() & ~t["id"].isin(lab).to_numpy()
    exp_picks, exp_d = k_center_greedy(feats[ok], 5, np.vstack([feats[:2], np.zeros((1, 2))]))
    assert list(res["id"]) == list(t["id"].to_numpy()[np.flatnonzero(ok)[exp_picks]])
    np.testing.assert_allclose(res["score"], exp_d)
    with pytest.raises(ValueError, match=r"centers: expected features float \[L, 2\]"):
        make_sampler("coreset", target="t", centers=np.zeros((1, 3))).select(t, 5)


def test_model_columns_missing_say_how_to_add_them():
    t = al_table().drop(columns=["al_margin__t"])
    with pytest.raises(ValueError, match=r"target: could not infer.*add_acquisition_columns.*--model SPEC"):
        make_sampler("margin").select(t, 3)


def shared_blind_spot_table(n: int = 200, seed: int = 1) -> pd.DataFrame:
    """MAD's usual picks, plus 10 images where target and competitor agree and both are unsure."""
    t = al_table(n, seed)
    rng = np.random.default_rng(seed)
    t["entropy__t"] = rng.uniform(0, 0.5, n).astype(np.float32)
    t["entropy__g"] = rng.uniform(0, 0.5, n).astype(np.float32)
    shared = np.arange(100, 110)
    t.loc[shared, ["entropy__t", "entropy__g"]] = 1.5
    t.loc[shared, "dpa__t__g"] = 0.01
    return t


def test_madplus_spends_its_share_on_shared_doubt_mad_misses():
    t = shared_blind_spot_table()
    planted = {f"img_{i:03d}.png" for i in range(100, 110)}
    mad = make_sampler("mad", target="t", ranges=[[0.0, 1.0]], n3=40).select(t, 40)
    assert not planted & set(mad["id"])
    plus = make_sampler("madplus", target="t", ranges=[[0.0, 1.0]], n3=40, shared=0.25).select(t, 40)
    shared = plus[plus["part"] == "shared"]
    assert len(shared) == 10 and set(shared["id"]) == planted
    assert list(plus.loc[plus["part"] == "mad", "id"]) == list(mad["id"][:30])  # MAD's order kept
    assert all(json.loads(r)["part"] == "shared" for r in shared["reason"])
    assert all(json.loads(r)["part"] == "mad" for r in plus.loc[plus["part"] == "mad", "reason"])
    assert describe(shared["reason"].iloc[0]).startswith("shared doubt (MAD+)")
    assert describe(plus.loc[plus["part"] == "mad", "reason"].iloc[0]).startswith("MAD part of MAD+")
    assert set(plus["part"][:4]) == {"mad", "shared"}  # interleaved, so a shorter list keeps the mix
    zero = make_sampler("madplus", target="t", ranges=[[0.0, 1.0]], n3=40, shared=0.0).select(t, 40)
    assert list(zero["id"]) == list(mad["id"])
    with pytest.raises(ValueError, match=r"shared: expected a number in \[0, 1\)"):
        make_sampler("madplus", target="t", shared=1.0).select(t, 5)


def test_madplus_uses_surprise_when_present():
    t = shared_blind_spot_table()
    t["surprise_mdsa__t"] = 0.0
    t.loc[150, ["surprise_mdsa__t", "dpa__t__g"]] = [9.0, 0.0]
    t.loc[150, ["entropy__t", "entropy__g"]] = 1.5
    plus = make_sampler("madplus", target="t", ranges=[[0.0, 1.0]], n3=10, shared=0.25).select(t, 40)
    first = json.loads(plus[plus["part"] == "shared"]["reason"].iloc[0])
    assert first["mdsa"] == 9.0


def test_madplus_excludes_only_the_mad_picks_it_keeps():
    """MAD's whole candidate list can cover a small pool; the shared part must still find the planted images."""
    t = shared_blind_spot_table()
    mad_all = make_sampler("mad", target="t", ranges=[[0.0, 1.0]], n3=200).select(t, None)
    planted = {f"img_{i:03d}.png" for i in range(100, 110)}
    assert planted <= set(mad_all["id"])  # every image is somewhere in MAD's list
    plus = make_sampler("madplus", target="t", ranges=[[0.0, 1.0]], n3=200, shared=0.25).select(t, 40)
    assert set(plus.loc[plus["part"] == "shared", "id"]) == planted and plus["id"].is_unique
    # no image where the models agree left: MAD fills the budget
    t2 = t.copy()
    t2["dpa__t__g"] = 0.5
    full = make_sampler("madplus", target="t", ranges=[[0.0, 1.0]], n3=200, shared=0.25, agree_quantile=0.5)
    res = full.select(t2.assign(entropy__g=float("nan")), 40)
    assert len(res) == 40 and set(res["part"]) == {"mad"}
