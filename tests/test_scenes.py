"""Procedural street scenes: determinism, label/image consistency, recorded conditions, sets on disk."""
from __future__ import annotations

import csv
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from blindspots.data.scenes import (
    BUILDING,
    FACTORS,
    LIGHTINGS,
    ROAD,
    SCENE_CLASSES,
    SKY,
    TRAIN_SLICE,
    VEGETATION,
    SceneConditions,
    generate_scene_set,
    read_conditions,
    render_scene,
    render_scene_arrays,
    sample_conditions,
    scene_seeds,
)

DAY = SceneConditions()


def test_classes() -> None:
    assert SCENE_CLASSES.num_classes >= 6
    for name in ("sky", "road", "building", "vegetation", "vehicle", "person"):
        SCENE_CLASSES.index(name)
    assert SCENE_CLASSES.ignore_index == 255


def test_same_seed_same_scene_and_seeds_differ() -> None:
    a, b = render_scene(11, 64), render_scene(11, 64)
    assert a.image.dtype == np.uint8 and a.image.shape == (64, 64, 3)
    assert a.mask.dtype == np.uint8 and a.mask.shape == (64, 64)
    np.testing.assert_array_equal(a.image, b.image)
    np.testing.assert_array_equal(a.mask, b.mask)
    assert a.conditions == b.conditions and a.seed == 11
    c = render_scene(12, 64)
    assert not np.array_equal(a.image, c.image)


def test_layout_does_not_depend_on_light_or_colour() -> None:
    """Lighting and colour shift change pixels, never labels: the same street at night."""
    for seed in range(3):
        day = render_scene(seed, 48, DAY)
        night = render_scene(seed, 48, replace(DAY, lighting="night"))
        shifted = render_scene(seed, 48, replace(DAY, color_shift=120.0))
        np.testing.assert_array_equal(day.mask, night.mask)
        np.testing.assert_array_equal(day.mask, shifted.mask)
        assert night.image.mean() < 0.5 * day.image.mean()
        assert not np.array_equal(day.image, shifted.image)


def _class_means(images: np.ndarray, masks: np.ndarray) -> dict[int, np.ndarray]:
    return {k: images[masks == k].astype(float).mean(0) for k in np.unique(masks)}


@pytest.mark.parametrize("tilt", [0.0, 20.0])
def test_labels_match_image_content(tilt: float) -> None:
    """Where the mask says sky the pixels are blue, road grey, vegetation green (also when rolled)."""
    cond = replace(DAY, tilt=tilt)
    scenes = [render_scene(s, 64, cond) for s in range(6)]
    means = _class_means(np.stack([s.image for s in scenes]), np.stack([s.mask for s in scenes]))
    r, g, b = means[SKY]
    assert b > r + 30 and b > g
    r, g, b = means[ROAD]
    assert max(r, g, b) - min(r, g, b) < 25
    r, g, b = means[VEGETATION]
    assert g > r and g > b
    # the image is not solvable from flat colours: pixels of one class vary
    road_pixels = np.stack([s.image for s in scenes])[np.stack([s.mask for s in scenes]) == ROAD]
    assert road_pixels.std(0).mean() > 5


def test_every_class_appears_in_a_few_scenes() -> None:
    _, masks, conds = render_scene_arrays(16, seed=0, distribution="train", size=64)
    assert set(np.unique(masks)) == set(range(SCENE_CLASSES.num_classes))
    assert all(not c.is_hard for c in conds)


def test_conditions_change_the_scene_measurably() -> None:
    seeds = range(8)

    def frac(cond: SceneConditions, classes: tuple[int, ...]) -> float:
        return float(np.mean([np.isin(render_scene(s, 48, cond).mask, classes).mean() for s in seeds]))

    objects = (5, 6)  # vehicle, person
    assert frac(replace(DAY, scale=2.5), objects) > 2 * frac(replace(DAY, scale=0.4), objects)
    assert frac(replace(DAY, occlusion=0.5), (SKY,)) < frac(DAY, (SKY,)) - 0.05
    assert frac(replace(DAY, clutter=35), objects) > frac(replace(DAY, clutter=2), objects)
    # camera pitch: a horizon high in the frame (looking down) leaves little sky
    assert frac(replace(DAY, horizon=0.2), (SKY,)) < frac(replace(DAY, horizon=0.75), (SKY,)) - 0.2
    assert frac(replace(DAY, horizon=0.75), (BUILDING, SKY)) > 0.5


def test_sample_conditions_distributions() -> None:
    def draw(dist: str, n: int) -> list[SceneConditions]:
        return [sample_conditions(np.random.default_rng([s, 0]), dist) for s in range(n)]

    assert not any(c.is_hard for c in draw("train", 300))
    hard = draw("hard", 300)
    assert all(c.is_hard for c in hard)
    assert {f for c in hard for f in c.hard_factors} == set(FACTORS)
    share = np.mean([c.is_hard for c in draw("pool", 3000)])
    assert 0.03 < share < 0.07  # failures must be rare in a pool
    broad = draw("broad", 300)
    assert {c.lighting for c in broad} == set(LIGHTINGS)
    assert 0.2 < np.mean([TRAIN_SLICE["scale"][0] <= c.scale <= TRAIN_SLICE["scale"][1] for c in broad]) < 0.9
    rng1, rng2 = np.random.default_rng(5), np.random.default_rng(5)
    assert sample_conditions(rng1, "broad") == sample_conditions(rng2, "broad")


def test_hard_factors_and_round_trip() -> None:
    c = SceneConditions(lighting="dusk", scale=2.2, tilt=1.0)
    assert c.hard_factors == ("lighting", "scale") and c.is_hard
    assert not DAY.is_hard
    d = c.to_dict()
    assert SceneConditions.from_dict(d) == c
    assert SceneConditions.from_dict({k: str(v) for k, v in d.items()} | {"is_hard": "True"}) == c


@pytest.mark.parametrize("kwargs, name", [({"lighting": "noon"}, "lighting"), ({"scale": 0.0}, "scale"),
                                          ({"tilt": 90.0}, "tilt"), ({"clutter": -1}, "clutter"),
                                          ({"occlusion": "a lot"}, "occlusion")])
def test_bad_conditions_raise(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        SceneConditions(**kwargs)


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="distribution"):
        sample_conditions(np.random.default_rng(0), "everything")
    with pytest.raises(ValueError, match="size"):
        render_scene(0, 8)
    with pytest.raises(ValueError, match="seed"):
        render_scene(-1, 32)
    with pytest.raises(ValueError, match="conditions"):
        render_scene(0, 32, {"lighting": "day"})  # type: ignore[arg-type]


conditions_strategy = st.builds(
    SceneConditions,
    lighting=st.sampled_from(LIGHTINGS),
    scale=st.floats(0.05, 5.0),
    color_shift=st.floats(-180, 180),
    occlusion=st.floats(0, 0.9),
    clutter=st.integers(0, 60),
    horizon=st.floats(0.05, 0.95),
    tilt=st.floats(-45, 45),
)


@settings(max_examples=25, deadline=None)
@given(cond=conditions_strategy, seed=st.integers(0, 2**31), size=st.integers(16, 72))
def test_any_valid_conditions_render(cond: SceneConditions, seed: int, size: int) -> None:
    sc = render_scene(seed, size, cond)
    assert sc.image.shape == (size, size, 3) and sc.image.dtype == np.uint8
    assert sc.mask.shape == (size, size) and sc.mask.max() < SCENE_CLASSES.num_classes
    assert sc.conditions == cond


def test_scene_seeds_prefix_stable() -> None:
    np.testing.assert_array_equal(scene_seeds(5, 3), scene_seeds(9, 3)[:5])
    assert len(set(scene_seeds(50, 3).tolist())) == 50


def test_generate_scene_set_writes_and_resumes(tmp_path) -> None:
    out = tmp_path / "set"
    ds = generate_scene_set(out, 6, seed=4, distribution="pool", size=32, progress=False)
    assert len(ds) == 6
    with open(out / "conditions.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["id"] for r in rows] == [f"scene_{i:06d}" for i in range(6)]
    assert {"id", "seed", "lighting", "scale", "color_shift", "occlusion", "clutter", "horizon", "tilt",
            "is_hard"} <= set(rows[0])
    conds = read_conditions(out)
    img, mask = ds.load(ds.ids[2])
    ref = render_scene(int(rows[2]["seed"]), 32, conds[rows[2]["id"]])
    np.testing.assert_array_equal(img, ref.image)
    np.testing.assert_array_equal(mask, ref.mask)
    images, masks, arr_conds = render_scene_arrays(6, seed=4, distribution="pool", size=32)
    np.testing.assert_array_equal(images[2], ref.image)
    assert arr_conds == [conds[r["id"]] for r in rows]
    # resume: a missing scene is rendered again, the others are left alone
    victim = out / "images" / "scene_000003.png"
    victim.unlink()
    keep = out / "images" / "scene_000001.png"
    mtime = keep.stat().st_mtime_ns
    generate_scene_set(out, 6, seed=4, distribution="pool", size=32, progress=False)
    np.testing.assert_array_equal(np.asarray(Image.open(victim)), images[3])
    assert keep.stat().st_mtime_ns == mtime
    assert not list(out.rglob("*.tmp"))


def test_cli_generate(tmp_path) -> None:
    from typer.testing import CliRunner

    from blindspots.cli import app

    res = CliRunner().invoke(app, ["scenes", "generate", str(tmp_path / "s"), "--n", "3", "--size", "32",
                                   "--distribution", "hard", "--seed", "2"])
    assert res.exit_code == 0, res.output
    assert "3 scenes (3 hard)" in res.output
    assert len(list((tmp_path / "s" / "masks").glob("*.png"))) == 3
    res = CliRunner().invoke(app, ["scenes", "generate", str(tmp_path / "t"), "--n", "3", "--distribution", "x"])
    assert res.exit_code != 0 and "distribution" in res.output


def test_parallel_rendering_gives_the_same_scenes(tmp_path) -> None:
    a = render_scene_arrays(40, seed=9, distribution="broad", size=24)
    b = render_scene_arrays(40, seed=9, distribution="broad", size=24, n_jobs=2)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[2] == b[2]
    with pytest.raises(ValueError, match="n_jobs"):
        render_scene_arrays(4, seed=0, distribution="train", size=24, n_jobs=0)
