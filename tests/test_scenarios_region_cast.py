"""The colour cast measured region by region (`scenarios.region_cast`): a hue rotation of a scene is
recovered with its sign, whatever the scene shows, against the usual colours of a small pool."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from blindspots.data.scenes import SCENE_CLASSES, render_scene
from blindspots.scenarios.region_cast import cast_attributes, region_chroma


def _chroma(scene):  # noqa: ANN001, ANN202
    return region_chroma(scene.image, scene.mask, SCENE_CLASSES.num_classes)


def test_cast_recovers_rotation_and_direction():
    pool = [render_scene(i, 48, distribution="train") for i in range(10)]
    turned = {deg: render_scene(20 + k, 48, conditions=replace(render_scene(20 + k, 48, distribution="train").conditions,
                                                              color_shift=deg))
              for k, deg in enumerate((-150.0, -90.0, 100.0, 160.0))}
    rows = [_chroma(s) for s in pool] + [_chroma(s) for s in turned.values()]
    cast = cast_attributes(np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]))
    angles = np.degrees(np.arctan2(cast["cast_sin"], cast["cast_cos"]))
    assert np.abs(angles[:10]).max() < 20, angles[:10]  # the pool in its usual colours: no cast
    for got, deg in zip(angles[10:], turned):
        assert abs((got - deg + 180) % 360 - 180) < 30, (deg, got)
        assert math.copysign(1, got) == math.copysign(1, deg)  # the direction, which the whole image's hue loses


def test_cast_without_map_and_bad_input():
    scene = render_scene(1, 32, distribution="train")
    means, counts = _chroma(scene)
    assert counts.sum() == 32 * 32 and np.iscomplexobj(means)
    cast = cast_attributes(np.stack([means, np.zeros_like(means)]), np.stack([counts, np.zeros_like(counts)]))
    assert np.isfinite(cast["cast_cos"][0]) and np.isnan(cast["cast_sin"][1])  # no map: NaN, not a guess
    with pytest.raises(ValueError, match="labels: expected a class map"):
        region_chroma(scene.image, scene.mask[:10], SCENE_CLASSES.num_classes)
    with pytest.raises(ValueError, match="means, counts"):
        cast_attributes(means[None], counts[None, :3])


def test_region_cast_collects_maps_of_other_sizes_and_models():
    """RegionCast: an image larger than the map is resized to it (scans may resize); each model gives
    its own cast and the directions are averaged; an image no model mapped stays NaN."""
    from blindspots.scenarios.region_cast import RegionCast

    scenes = [render_scene(i, 32, distribution="train") for i in range(6)]
    big = [np.repeat(np.repeat(s.image, 2, axis=0), 2, axis=1) for s in scenes]  # 64 px images, 32 px maps
    rc = RegionCast(len(scenes) + 1, SCENE_CLASSES.num_classes, ["a", "b"])
    for n, (s, img) in enumerate(zip(scenes, big)):
        rc.add(n, "a", img, s.mask)
        rc.add(n, "b", s.image, s.mask)
    cast = rc.attributes()
    assert cast["cast_cos"].shape == (7,) and np.isnan(cast["cast_cos"][6])
    assert (cast["cast_cos"][:6] > 0.9).all()  # the pool in its usual colours
