"""Procedural street scenes with pixel labels and recorded conditions.

A scene is a one-point-perspective street: sky, a road with lane markings, tiled sidewalks,
building facades with windows (or a park with trees), street trees, lamp poles and signs,
cars, buses and people, painted far-to-near so the label mask is exact. Every scene records
the *conditions* it was rendered under (lighting, object scale, colour shift, occlusion,
clutter, viewpoint). A model trained on the narrow "train" slice of conditions fails in
predictable, measurable ways outside it (`SceneConditions.is_hard`), which is what MAD
mining ("Efficiently Troubleshooting Image Segmentation Models with Human-in-the-Loop";
docs/architecture.md#papers) is meant to find.

Rendering is vectorised numpy (no per-pixel Python loops). The same seed gives the same
scene; the layout of a seed does not depend on the conditions' lighting / colour shift /
viewpoint, so `render_scene(s, conditions=replace(c, lighting="night"))` is the same street
at night. Geometry is in relative units, so one seed gives the same street at any size.

Modules: `conditions` (classes, condition ranges, sampling), `canvas` (drawing surface, noise),
`street` (the painter), `render` (one scene), `generate` (sets in memory or on disk, in processes).
"""
from blindspots.data.scenes.conditions import (BUILDING, DISTRIBUTIONS, FACTORS, FULL_RANGES, HARD_RANGES, LIGHTINGS,
                                               PERSON, POLE, POOL_HARD_FRACTION, ROAD, SCENE_CLASSES, SIDEWALK, SKY,
                                               TRAIN_SLICE, VALID_RANGES, VEGETATION, VEHICLE, SceneConditions,
                                               sample_conditions)
from blindspots.data.scenes.generate import (CONDITIONS_CSV, generate_scene_set, read_conditions, render_scene_arrays,
                                             scene_seeds, scene_set_conditions)
from blindspots.data.scenes.render import Scene, render_scene

__all__ = ["BUILDING", "CONDITIONS_CSV", "DISTRIBUTIONS", "FACTORS", "FULL_RANGES", "HARD_RANGES", "LIGHTINGS",
           "PERSON", "POLE", "POOL_HARD_FRACTION", "ROAD", "SCENE_CLASSES", "SIDEWALK", "SKY", "TRAIN_SLICE",
           "VALID_RANGES", "VEGETATION", "VEHICLE", "Scene", "SceneConditions", "generate_scene_set",
           "read_conditions", "render_scene", "render_scene_arrays", "sample_conditions", "scene_seeds",
           "scene_set_conditions"]
