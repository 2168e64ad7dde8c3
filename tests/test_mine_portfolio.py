"""Rate broadly, label narrowly: query by committee against its formula, the EXP3 proposer shares on a
scripted sequence, the S rule against lowest MOS, and the portfolio sampler's mix and reasons."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from blindspots.mine import make_sampler
from blindspots.mine.samplers.bandit import ProposerShares, allocate, round_rewards
from blindspots.mine.samplers.qbc import committee_disagreement, qbc_column
from blindspots.mine.reasons import describe
from blindspots.mine.samplers.teach import lowest_mos_order, teach_order


def test_committee_disagreement_matches_the_direct_formula():
    # three members, two classes, one image of 1 x 2 pixels
    p = np.array([[0.9, 0.6], [0.2, 0.7], [0.8, 0.1]])  # member x pixel: P(class 0)
    probas = np.stack([np.stack([p[m], 1 - p[m]])[None, :, None, :] for m in range(3)])  # [3, 1, 2, 1, 2]
    ve, kl = committee_disagreement(probas)
    # pixel 0: votes 0, 1, 0 -> shares 2/3, 1/3; pixel 1: votes 0, 0, 1 -> the same
    ve_pixel = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    kls = []
    for j in range(2):
        dists = [(p[m, j], 1 - p[m, j]) for m in range(3)]
        cons = [sum(d[c] for d in dists) / 3 for c in range(2)]
        kls.append(sum(sum(d[c] * math.log(d[c] / cons[c]) for c in range(2)) for d in dists) / 3)
    assert ve[0] == pytest.approx(ve_pixel) and kl[0] == pytest.approx(sum(kls) / 2)
    agree = np.stack([probas[0]] * 3)  # identical members: no disagreement
    ve0, kl0 = committee_disagreement(agree)
    assert ve0[0] == 0 and kl0[0] == pytest.approx(0, abs=1e-12)
    with pytest.raises(ValueError, match=r"probas: expected M >= 2"):
        committee_disagreement(probas[:1])


def test_qbc_sampler_ranks_by_its_column():
    t = pd.DataFrame({"id": [f"i{j}" for j in range(5)], "status": "ok",
                      qbc_column("t", "vote"): [0.1, 0.5, 0.3, 0.0, 0.9], qbc_column("t", "kl"): [0.4, 0, 0, 0, 0]})
    res = make_sampler("qbc", target="t").select(t, 3)
    assert list(res["id"]) == ["i4", "i1", "i2"] and "vote entropy 0.900" in describe(res["reason"][0])
    assert list(make_sampler("qbc", measure="kl").select(t, 1)["id"]) == ["i0"]
    with pytest.raises(ValueError, match="measure: expected one of"):
        make_sampler("qbc", measure="x").select(t, 1)
    with pytest.raises(ValueError, match=r"target: expected a model with a `al_qbcvote__\{T\}` column"):
        make_sampler("qbc", target="u").select(t, 1)


def test_shares_move_toward_the_proposer_whose_picks_bought_most():
    bandit = ProposerShares({"mad": 1.0, "margin": 1.0, "coreset": 1.0}, floor=0.3)
    start = bandit.shares()
    assert start == pytest.approx({"mad": 1 / 3, "margin": 1 / 3, "coreset": 1 / 3})
    # scripted: every round gains on the test set, and it was margin's candidates that made S
    for _ in range(4):
        m = ["mad"] * 4 + ["margin"] * 4 + ["coreset"] * 4
        s = ["margin", "margin", "margin", "mad"]
        bandit.update(round_rewards(0.02, m, s))
    shares = bandit.shares()
    assert shares["margin"] > start["margin"] + 0.15 and shares["margin"] > shares["mad"] > shares["coreset"]
    assert min(shares.values()) >= 0.3 / 3 - 1e-12  # the floor: no proposer starves
    # a round that lost on the test set blames the proposers whose picks were labelled
    after = bandit.update(round_rewards(-0.02, ["margin"] * 2 + ["mad"] * 2, ["margin"]))
    assert after["margin"] < shares["margin"]
    assert len(bandit.history) == 5 and ProposerShares.from_dict(bandit.to_dict()).shares() == pytest.approx(after)
    with pytest.raises(ValueError, match="rewards: expected proposers among"):
        bandit.update({"badge": 1.0})


def test_round_rewards_and_allocate():
    r = round_rewards(0.01, ["a", "a", "b", "b"], ["a"])
    assert r == pytest.approx({"a": 0.5 * 1.0 / 0.5, "b": 0.0})
    assert allocate({"a": 0.5, "b": 0.3, "c": 0.2}, 7) == {"a": 4, "b": 2, "c": 1}
    assert sum(allocate({"a": 1, "b": 1, "c": 1}, 10).values()) == 10


def test_teach_rule_differs_from_lowest_mos():
    # candidates 0-2: the three worst-rated, near-copies of one labelled image, and the model is sure of them;
    # candidates 3-5: rated a little better, each unlike anything labelled, and the model is unsure
    mos = np.array([1.0, 1.1, 1.2, 2.0, 2.1, 2.2, 4.5])
    unc = np.array([0.1, 0.1, 0.1, 0.8, 0.7, 0.9, 0.2])
    feats = np.array([[0.0, 0.0], [0.01, 0.0], [0.0, 0.01], [5.0, 0.0], [0.0, 5.0], [-5.0, 0.0], [0.1, 0.1]])
    centers = np.array([[0.0, 0.02]])
    assert lowest_mos_order(mos, 3).tolist() == [0, 1, 2]
    order, parts = teach_order(mos, 3, uncertainty=unc, features=feats, centers=centers)
    assert set(order.tolist()) == {3, 4, 5} and parts.shape == (3, 3)
    # without the unsure and new terms it is the lowest-MOS rule again
    assert teach_order(mos, 3, uncertainty=unc, features=feats, centers=centers, weights=(1, 0, 0))[0].tolist() \
        == [0, 1, 2]
    with pytest.raises(ValueError, match=r"uncertainty: expected float \[7\]"):
        teach_order(mos, 3, uncertainty=unc[:3])


def portfolio_table(n: int = 80, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"id": [f"img_{i:03d}.png" for i in range(n)], "status": "ok",
                         "al_margin__t": rng.random(n), "al_feat__t__0": rng.normal(size=n),
                         "al_feat__t__1": rng.normal(size=n), "entropy__t": rng.random(n),
                         "entropy__g": rng.random(n), "dpa__t__g": rng.random(n),
                         "frac__t__0": rng.uniform(0.1, 0.9, n), "frac__g__0": rng.uniform(0.1, 0.9, n)})


def test_portfolio_splits_m_by_share_and_names_the_proposer():
    t = portfolio_table()
    shares = {"mad": 0.5, "margin": 0.25, "coreset": 0.25}
    res = make_sampler("portfolio", target="t", ranges=[[0.0, 1.0]], n3=10, shares=shares).select(t, 12)
    assert len(res) == 12 and res["id"].is_unique
    assert res["proposer"].value_counts().to_dict() == {"mad": 6, "margin": 3, "coreset": 3}
    for r, p in zip(res["reason"], res["proposer"]):
        d = json.loads(r)
        assert d["strategy"] == "portfolio" and d["proposer"] == p and describe(r).startswith(f"proposed by {p}")
    # margin's part is margin's own top picks
    mine = set(res.loc[res["proposer"] == "margin", "id"])
    top_margin = list(make_sampler("margin", target="t").select(t, None)["id"])
    assert mine <= set(top_margin[:3 + 6 + 3])
    # surprise has no column here: left out, its share spread over the others
    res2 = make_sampler("portfolio", target="t", ranges=[[0.0, 1.0]], n3=10).select(t, 10)
    assert "surprise" not in set(res2["proposer"]) and len(res2) == 10
    with pytest.raises(ValueError, match="shares: expected proposers among"):
        make_sampler("portfolio", target="t", shares={"badge": 1.0}).select(t, 5)


def test_portfolio_qbc_proposer_takes_the_committee_column_and_is_left_out_without_it():
    t = portfolio_table()
    t[qbc_column("t", "vote")] = np.linspace(0.0, 1.0, len(t))  # the last rows: the committee disagrees most
    shares = {"mad": 0.5, "qbc": 0.5}
    res = make_sampler("portfolio", target="t", ranges=[[0.0, 1.0]], n3=10, shares=shares).select(t, 8)
    mine = list(res.loc[res["proposer"] == "qbc", "id"])
    assert len(mine) == 4
    top = list(make_sampler("qbc", target="t").select(t, None)["id"])
    assert set(mine) <= set(top[:8])  # QBC's own top picks (those MAD took first are skipped)
    # no committee column: qbc proposes nothing and MAD fills M
    res2 = make_sampler("portfolio", target="t", ranges=[[0.0, 1.0]], n3=10, shares=shares).select(
        t.drop(columns=[qbc_column("t", "vote")]), 8)
    assert set(res2["proposer"]) == {"mad"} and len(res2) == 8


def test_the_loop_runs_the_committee_for_the_portfolio_only_when_its_prior_has_qbc(monkeypatch):
    from blindspots.mine.samplers import registry

    monkeypatch.setattr(registry, "PRIOR", {"mad": 2.0, "margin": 1.0})
    assert registry.needs_committee("qbc") and not registry.needs_committee("portfolio")
    monkeypatch.setattr(registry, "PRIOR", {"mad": 2.0, "qbc": 1.0})
    assert registry.needs_committee("portfolio") and not registry.needs_committee("mad")
