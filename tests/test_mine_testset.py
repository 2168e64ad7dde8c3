"""Unbiased test sets (mine), the Table 1 leaderboard and ranking stability (Appendix C; loop)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from blindspots.loop.leaderboard import format_leaderboard, leaderboard
from blindspots.loop.ranking import miou_from_confusion, per_image_confusions, ranking_stability
from blindspots.mine.testset import build_test_set, main_foreground_class


def frac_table(n: int = 60, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cols = {"id": [f"i{j}" for j in range(n)], "status": ["ok"] * n}
    for m in ("tgt", "g1"):
        f = rng.dirichlet(np.ones(5), n)
        for k in range(5):
            cols[f"frac__{m}__{k}"] = f[:, k].astype(np.float32)
    return pd.DataFrame(cols)


def test_main_foreground_class() -> None:
    t = frac_table()
    mc = main_foreground_class(t, ["tgt", "g1"], background=(0,))
    mean = np.stack([(t[f"frac__tgt__{k}"] + t[f"frac__g1__{k}"]).to_numpy() for k in range(1, 5)], 1)
    np.testing.assert_array_equal(mc.to_numpy(), mean.argmax(1) + 1)
    t.loc[0, [f"frac__{m}__{k}" for m in ("tgt", "g1") for k in range(1, 5)]] = 0
    assert main_foreground_class(t, ["tgt", "g1"])["i0"] == -1
    with pytest.raises(ValueError, match="models"):
        main_foreground_class(t, [])


def test_build_test_set_constraints() -> None:
    ids = [f"i{j}" for j in range(100)]
    main = {i: j % 6 for j, i in enumerate(ids)}  # 6 classes
    main["i5"] = -1  # no foreground object
    ood, used = {"i0", "i1"}, {"i2", "i3", "i4"}
    ts = build_test_set(pd.DataFrame({"id": ids}), main_class=main, out_of_domain=ood, exclude=used, seed=1)
    assert len(ts) == 24  # at most 4 per class x 6 classes < 30
    assert ts["main_class"].value_counts().max() <= 4
    assert not set(ts["id"]) & (ood | used | {"i5"})
    assert ts["id"].is_unique
    pd.testing.assert_frame_equal(ts, build_test_set(ids, main_class=main, out_of_domain=ood, exclude=used, seed=1))
    other = build_test_set(ids, main_class=main, out_of_domain=ood, exclude=used, seed=2)
    assert set(other["id"]) != set(ts["id"])
    small = build_test_set(ids, main_class=main, size=10, max_per_class=10, seed=0)
    assert len(small) == 10
    with pytest.raises(ValueError, match="size"):
        build_test_set(ids, main_class=main, size=0)


def test_confusions_and_miou() -> None:
    gt = np.array([[[0, 0], [1, 255]]])
    pred = np.array([[[0, 1], [1, 1]]])
    cm = per_image_confusions(pred, gt, 3)
    assert cm.shape == (1, 3, 3) and cm.sum() == 3
    assert cm[0, 0, 0] == 1 and cm[0, 0, 1] == 1 and cm[0, 1, 1] == 1
    assert miou_from_confusion(cm[0]) == pytest.approx((1 / 2 + 1 / 2) / 2)
    with pytest.raises(ValueError, match="pred"):
        per_image_confusions(pred, gt[:, :1], 3)


def test_leaderboard_layout() -> None:
    res = {"dfn": {"T0": 0.80, "T1": 0.13}, "lrn": {"T0": 0.71, "T1": 0.13}, "target": {"T0": 0.79, "T1": 0.18}}
    lb = leaderboard(res, target="target")
    assert list(lb.index) == ["dfn", "lrn", "target"]
    assert list(lb.columns) == ["role", "T0", "T1"]
    assert lb.loc["target", "role"] == "target"
    text = format_leaderboard(lb)
    assert "0.1800" in text and "target" in text
    grouped = leaderboard({"dfn": {("0", "T0"): 0.8, ("0", "T1"): 0.1, ("1", "T2"): 0.1},
                           "tgt": {("0", "T0"): 0.79, ("1", "T0"): 0.78}}, target="tgt")
    assert grouped.columns.nlevels == 2 and np.isnan(grouped.loc["tgt", ("1", "T2")])
    with pytest.raises(ValueError, match="target"):
        leaderboard(res, target="missing")
    with pytest.raises(ValueError, match="results"):
        leaderboard({})


def test_ranking_stability() -> None:
    rng = np.random.default_rng(0)
    n, c = 40, 3
    gt = rng.integers(0, c, (n, 16, 16))
    conf = {}
    for m, err in (("a", 0.05), ("b", 0.2), ("c", 0.4), ("d", 0.6)):
        pred = np.where(rng.random(gt.shape) < err, rng.integers(0, c, gt.shape), gt)
        conf[m] = per_image_confusions(pred, gt, c)
    st = ranking_stability(conf)
    assert list(st["k"]) == list(range(20, 40))
    assert (st["srcc"] == 1.0).all()  # well separated models: the ranking never changes
    st2 = ranking_stability(conf, ks=[1, 5], n_repeats=5, seed=0)
    assert st2["srcc"].between(-1, 1).all()
    with pytest.raises(ValueError, match="confusions"):
        ranking_stability({"a": conf["a"]})
    with pytest.raises(ValueError, match="ks"):
        ranking_stability(conf, ks=[0])
