"""MAD selection (paper Eq. 2) against a brute-force implementation on small score tables."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from blindspots.mine.samplers.mad import MADSampler, class_area_ranges

MODELS = ["tgt", "g1", "g2"]


def make_table(n: int, num_classes: int = 4, seed: int = 0, ties: bool = False, errors: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cols: dict[str, object] = {"id": [f"img_{i:05d}.png" for i in range(n)], "status": ["ok"] * n}
    for m in MODELS:
        f = rng.dirichlet(np.full(num_classes, 0.5), size=n).astype(np.float32)
        f[rng.random((n, num_classes)) < 0.3] = 0  # absent classes
        for k in range(num_classes):
            cols[f"frac__{m}__{k}"] = f[:, k]
        cols[f"entropy__{m}"] = rng.random(n).astype(np.float32)
    for g in MODELS[1:]:
        d = rng.random(n)
        if ties:
            d = np.round(d * 4) / 4  # many exact ties
        cols[f"dpa__tgt__{g}"] = d.astype(np.float32)
        cols[f"dmiou__tgt__{g}"] = rng.random(n).astype(np.float32)
    table = pd.DataFrame(cols)
    if errors:
        bad = rng.choice(n, errors, replace=False)
        table.loc[bad, "status"] = "error"
    return table


def brute_force(table: pd.DataFrame, ranges: np.ndarray, n3: int, kind: str = "dpa") -> dict[str, list[tuple]]:
    """Straightforward Eq. 2: per (competitor, class, direction) sort everything, keep top n3."""
    picks: dict[str, list[tuple]] = {}
    ok = table["status"] == "ok"
    for g in ["g1", "g2"]:
        for direction, model in (("target", "tgt"), ("competitor", g)):
            for k in range(ranges.shape[0]):
                p, q = ranges[k]
                f = table[f"frac__{model}__{k}"]
                sub = table[ok & (f > 0) & (f >= np.float32(p)) & (f <= np.float32(q))]
                d = sub[f"{kind}__tgt__{g}"].astype(np.float64)
                ordered = sorted(zip(-d.to_numpy(), sub.index), key=lambda t: (t[0], t[1]))[:n3]
                for rank, (negd, row) in enumerate(ordered):
                    picks.setdefault(table.at[row, "id"], []).append((g, k, direction, rank))
    return picks


def as_picks(result: pd.DataFrame) -> dict[str, list[tuple]]:
    out = {}
    for i, reason in zip(result["id"], result["reason"]):
        r = json.loads(reason)
        out[i] = [(p["competitor"], p["class"], p["by"], p["rank"]) for p in r["picks"]]
    return out


@pytest.mark.parametrize("ties", [False, True])
def test_matches_brute_force(ties: bool) -> None:
    table = make_table(300, ties=ties, errors=10)
    ranges = np.array([[0.05, 0.6], [0.0, 1.0], [0.2, 0.3], [0.1, 0.9]])
    res = MADSampler("tgt", distance="pixel", n3=7, ranges=ranges).select(table)
    expected = brute_force(table, ranges, 7)
    got = as_picks(res)
    assert set(got) == set(expected)
    for i in expected:
        assert sorted(got[i]) == sorted(expected[i])
    assert res["id"].is_unique
    assert len(res) <= 2 * 2 * 4 * 7
    # score is the largest distance among the picks
    row = table.set_index("id").loc[res["id"]]
    for (i, s), rr in zip(res[["id", "score"]].itertuples(index=False), res["reason"]):
        comps = {p["competitor"] for p in json.loads(rr)["picks"]}
        assert s == pytest.approx(max(float(row.at[i, f"dpa__tgt__{g}"]) for g in comps))


@pytest.mark.parametrize("ties", [False, True])
def test_head_cut_and_fallback_match_brute_force(monkeypatch: pytest.MonkeyPatch, ties: bool) -> None:
    import blindspots.mine.samplers.mad as mad

    monkeypatch.setattr(mad, "HEAD_MIN", 8)  # a short sorted head: rare classes need the fallback
    table = make_table(2000, seed=11, ties=ties, errors=30)
    ranges = np.array([[0.05, 0.6], [0.0, 1.0], [0.2, 0.21], [0.1, 0.9]])
    res = MADSampler("tgt", n3=3, ranges=ranges).select(table)
    expected = brute_force(table, ranges, 3)
    assert {i: sorted(v) for i, v in as_picks(res).items()} == {i: sorted(v) for i, v in expected.items()}


def test_miou_distance_and_single_direction() -> None:
    table = make_table(200, seed=3)
    ranges = np.tile([0.0, 1.0], (4, 1))
    res = MADSampler("tgt", distance="miou", n3=5, ranges=ranges, both_directions=False).select(table)
    exp = {i: [p for p in v if p[2] == "target"] for i, v in brute_force(table, ranges, 5, "dmiou").items()}
    exp = {i: v for i, v in exp.items() if v}
    assert {i: sorted(v) for i, v in as_picks(res).items()} == {i: sorted(v) for i, v in exp.items()}
    assert all(json.loads(r)["distance"] == "dmiou" for r in res["reason"])


def test_errors_never_selected_and_infers_names() -> None:
    table = make_table(150, errors=40)
    res = MADSampler(n3=10).select(table)  # target and competitors inferred
    bad = set(table.loc[table["status"] != "ok", "id"])
    assert not bad & set(res["id"])
    assert {p["competitor"] for r in res["reason"] for p in json.loads(r)["picks"]} == {"g1", "g2"}


def test_priority_and_truncation() -> None:
    table = make_table(400, seed=5)
    full = MADSampler("tgt", n3=10, ranges=np.tile([0.0, 1.0], (4, 1))).select(table)
    assert full["best_rank"].is_monotonic_increasing
    top = MADSampler("tgt", n3=10, ranges=np.tile([0.0, 1.0], (4, 1))).select(table, n=16)
    assert list(top["id"]) == list(full["id"][:16])
    assert (top["best_rank"] == 0).sum() == min(16, (full["best_rank"] == 0).sum())


def test_nan_range_skips_class_and_deterministic() -> None:
    table = make_table(200, seed=7)
    ranges = np.array([[np.nan, np.nan], [0.0, 1.0], [np.nan, np.nan], [np.nan, np.nan]])
    a = MADSampler("tgt", n3=4, ranges=ranges)
    r1, r2 = a.select(table, seed=0), a.select(table, seed=1)
    pd.testing.assert_frame_equal(r1, r2)
    assert {p["class"] for r in r1["reason"] for p in json.loads(r)["picks"]} == {1}
    assert set(a.picks_.columns) == {"id", "competitor", "class_id", "direction", "distance", "rank"}


def test_fit_uses_quartiles_of_training_masks() -> None:
    masks = []
    for area in (4, 8, 12, 16, 20):  # class 1 covers area/100 of a 10x10 mask
        m = np.zeros((10, 10), np.uint8)
        m.flat[:area] = 1
        masks.append(m)
    masks[0][9, 9] = 255  # ignored pixels count in the area but not as a class
    r = class_area_ranges(masks, 3)
    np.testing.assert_allclose(r[1], [0.08, 0.16])
    assert np.isnan(r[2]).all()
    s = MADSampler("tgt", n3=3).fit(masks, 4)
    assert s.ranges_.shape == (4, 2)


@pytest.mark.parametrize("kwargs, match", [
    ({"distance": "l2"}, "distance"), ({"n3": 0}, "n3"), ({"target": "nope"}, "target"),
    ({"ranges": np.zeros((4, 3))}, "ranges"), ({"ranges": {0: (0.5, 0.2)}}, "ranges"),
    ({"competitors": ["zz"]}, "table"),
])
def test_bad_settings(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MADSampler(**kwargs).select(make_table(20))


def test_bad_table() -> None:
    with pytest.raises(ValueError, match="table"):
        MADSampler("tgt").select({"id": [1]})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n"):
        MADSampler("tgt", ranges=np.tile([0.0, 1.0], (4, 1))).select(make_table(20), n=-1)
    with pytest.raises(ValueError, match="masks"):
        class_area_ranges([np.full((3, 3), 7)], 3)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n3=st.integers(1, 12), n=st.integers(1, 120))
def test_invariants(seed: int, n3: int, n: int) -> None:
    table = make_table(n, seed=seed, ties=seed % 2 == 0)
    res = MADSampler("tgt", n3=n3, ranges=np.tile([0.1, 0.8], (4, 1))).select(table)
    assert res["id"].is_unique
    assert len(res) <= 2 * 2 * 4 * n3
    assert (res["n_picks"] >= 1).all()
    assert list(res.columns[:3]) == ["id", "score", "reason"]


def test_released_settings_mean_sd_windows_without_background():
    from blindspots.mine.samplers.mad import released_settings

    masks = [np.zeros((10, 10), np.uint8) for _ in range(3)]
    masks[0][:2] = 1  # class 1 covers 0.2, 0.4 and 0.6 of three images
    masks[1][:4] = 1
    masks[2][:6] = 1
    s = released_settings(masks, 3)
    sd = np.std([0.2, 0.4, 0.6])
    assert s["distance"] == "miou" and s["class_ids"] == [1]  # background 0 out; class 2 never present
    np.testing.assert_allclose(s["ranges"][1], [0.4 - sd, 0.4 + sd])
    assert np.isnan(s["ranges"][2]).all()
