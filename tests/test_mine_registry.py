"""The one sampler registry, duplicates picked once by every sampler, plain-language reasons."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from blindspots.mine import (
    EntropySampler, MADSampler, RandomSampler, SurpriseSampler, make_sampler, sampler_names, sampler_settings,
)
from blindspots.mine.samplers.mad import class_area_ranges, class_area_ranges_from_table
from blindspots.mine.reasons import describe, percent


def test_registry_lists_and_builds_every_strategy():
    assert sampler_names()[0] == "mad"
    assert {"mad", "entropy", "surprise", "random"} <= set(sampler_names())
    assert isinstance(make_sampler("mad", target="t", n3=5), MADSampler)
    assert make_sampler("mad", n3=5).n3 == 5
    assert isinstance(make_sampler("entropy", target="t"), EntropySampler)
    assert isinstance(make_sampler("surprise", kind="lsa"), SurpriseSampler)
    assert isinstance(make_sampler("random"), RandomSampler)
    assert "n3" in sampler_settings("mad") and sampler_settings("random") == ()
    with pytest.raises(ValueError, match=r"strategy: expected one of \['mad'"):
        make_sampler("nope")
    with pytest.raises(ValueError, match=r"settings: .*'random'.*\['n3'\]"):
        make_sampler("random", n3=3)


def dup_table(n: int = 40, seed: int = 0) -> pd.DataFrame:
    """A score table where rows 2k and 2k+1 are exact duplicates (same hash, same scores)."""
    rng = np.random.default_rng(seed)
    half = n // 2
    base = pd.DataFrame({
        "entropy__t": rng.random(half).astype(np.float32),
        "frac__t__0": rng.uniform(0.2, 0.8, half).astype(np.float32),
        "frac__g__0": rng.uniform(0.2, 0.8, half).astype(np.float32),
        "dpa__t__g": rng.random(half),
        "dmiou__t__g": rng.random(half),
        "surprise_mdsa__t": rng.random(half).astype(np.float32),
        "content_hash": [f"h{i:03d}" for i in range(half)],
    })
    df = base.loc[base.index.repeat(2)].reset_index(drop=True)
    df.insert(0, "id", [f"img_{i:03d}.jpg" for i in range(n)])
    df.insert(1, "status", "ok")
    df.loc[0, "status"] = "error"  # the first copy failed: its twin is still pickable
    return df


@pytest.mark.parametrize("name", ["mad", "entropy", "surprise", "random"])
def test_every_sampler_picks_each_content_hash_once(name):
    t = dup_table()
    settings = {"mad": {"target": "t", "ranges": [[0.0, 1.0]], "n3": 50}}.get(name, {})
    sampler = make_sampler(name, **settings)
    res = sampler.select(t, None, seed=1)
    hashes = t.set_index("id").loc[res["id"], "content_hash"]
    assert hashes.is_unique and len(res) == 20
    assert "img_001.jpg" in set(res["id"])  # twin of the failed row
    # without the hash column, duplicates are separate rows (as before)
    assert len(sampler.select(t.drop(columns="content_hash"), None, seed=1)) == 39


def test_ranges_from_predictions_match_the_mask_quartiles():
    rng = np.random.default_rng(3)
    maps = [rng.integers(0, 3, (8, 8)) * (rng.random() < 0.8) for _ in range(30)]
    table = pd.DataFrame({"id": [f"{i}.png" for i in range(30)], "status": "ok"})
    for k in range(3):
        table[f"frac__t__{k}"] = np.array([(m == k).mean() for m in maps], np.float32)
    got = class_area_ranges_from_table(table, "t")
    np.testing.assert_allclose(got, class_area_ranges(maps, 3), atol=1e-6)


def test_reasons_read_like_sentences():
    mad = json.dumps({"distance": "dpa", "target": "target", "picks": [
        {"competitor": "deeplab", "class": 1, "by": "target", "d": 0.38, "rank": 0}]})
    assert describe(mad, ["background", "person"]) == \
        "target and deeplab label 38% of pixels differently (ranked among the images where target shows person)"
    assert "mIoU distance 0.38" in describe(mad.replace('"dpa"', '"dmiou"'), ["background", "person"])
    # a small share is not rounded to nothing; the class names whose map it is
    small = mad.replace('"d": 0.38', '"d": 0.004').replace('"by": "target"', '"by": "competitor"')
    assert describe(small, ["background", "person"]) == \
        "target and deeplab label <1% of pixels differently (ranked among the images where deeplab shows person)"
    assert describe(json.dumps({"strategy": "entropy", "target": "t", "value": 0.4123})).startswith(
        "t's mean per-pixel entropy is 0.412")
    assert describe(json.dumps({"strategy": "random", "seed": 4})) == "random pick (seed 4)"
    assert "MDSA" in describe(json.dumps({"strategy": "surprise", "kind": "mdsa", "target": "t", "sa": 2.0}))
    assert describe("not json") == "not json"
    assert [percent(x) for x in (0.0, 0.004, 0.01, 0.38, 0.996, 1.0)] == ["0%", "<1%", "1%", "38%", ">99%", "100%"]


def test_project_strategies_are_the_registry():
    # config.py is a foundation and may not import mine/, so it keeps a tuple; it must be the registry's list
    from blindspots.config import STRATEGIES
    from blindspots.mine.samplers.registry import sampler_names

    assert tuple(STRATEGIES) == sampler_names()


def test_a_strategy_without_its_required_settings_is_a_value_error_naming_them():
    """`blindspots mine -s scenario` ended in a TypeError traceback (ScenarioSampler needs scenarios=)."""
    with pytest.raises(ValueError, match=r"settings: strategy 'scenario' needs \['scenarios'\].*got \[\]"):
        make_sampler("scenario")
    with pytest.raises(ValueError, match=r"needs \['scenarios'\].*got \['features'\]"):
        make_sampler("scenario", features=None)


def test_surprise_without_columns_of_its_kind_names_the_missing_columns_not_the_target():
    """`mine -s surprise --kind lsa` on a scan with MDSA columns only said "could not infer the model ...
    pass target=", though no target would help: the LSA columns are missing."""
    t = dup_table()  # surprise_mdsa__t only
    with pytest.raises(ValueError, match=r"kind: expected `surprise_lsa__<model>` columns.*Scan.add_surprise.*"
                                         r"`surprise score --scan` command\), got none "
                                         r"\(surprise columns here: \['surprise_mdsa__t'\]\)"):
        make_sampler("surprise", kind="lsa").select(t, 5)
    t["surprise_mdsa__u"] = t["surprise_mdsa__t"]
    with pytest.raises(ValueError, match=r"target: could not infer"):  # two models: which one is a real question
        make_sampler("surprise").select(t, 5)
