"""Scene classes, the conditions a scene is rendered under and how they are drawn.

`SceneConditions` records lighting, object scale, colour shift, occlusion, clutter and viewpoint;
`TRAIN_SLICE` is the target's narrow training slice and `sample_conditions` draws from the "train",
"hard", "pool" and "broad" distributions.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from blindspots.data.classes import Classes

SKY, ROAD, SIDEWALK, BUILDING, VEGETATION, VEHICLE, PERSON, POLE = range(8)
SCENE_CLASSES = Classes(
    names=("sky", "road", "sidewalk", "building", "vegetation", "vehicle", "person", "pole"),
    # Cityscapes colours, so masks look familiar.
    palette=np.array(
        [[70, 130, 180], [128, 64, 128], [244, 35, 232], [70, 70, 70],
         [107, 142, 35], [0, 0, 142], [220, 20, 60], [153, 153, 153]], dtype=np.uint8),
)

LIGHTINGS = ("day", "dusk", "night")
DISTRIBUTIONS = ("train", "broad", "pool", "hard")
POOL_HARD_FRACTION = 0.05
"""Share of "pool" scenes drawn from the "hard" distribution (the rest is in-distribution)."""

# The target's training slice (inclusive). A scene with any factor outside it is hard.
TRAIN_SLICE: dict[str, tuple[float, float]] = {
    "scale": (0.8, 1.25),        # object size multiplier
    "color_shift": (-15.0, 15.0),  # hue rotation, degrees
    "occlusion": (0.0, 0.08),    # frame share covered by near occluders
    "clutter": (2, 10),          # number of cars / people / extra poles
    "horizon": (0.38, 0.52),     # horizon row, fraction of height (camera pitch)
    "tilt": (-4.0, 4.0),         # camera roll, degrees
}
# Where the "hard" distribution puts a shifted factor (clearly outside the slice).
HARD_RANGES: dict[str, tuple[tuple[float, float], ...]] = {
    "scale": ((0.3, 0.5), (2.0, 3.0)),
    "color_shift": ((-180.0, -75.0), (75.0, 180.0)),
    "occlusion": ((0.3, 0.55),),
    "clutter": ((25, 40),),
    "horizon": ((0.12, 0.25), (0.68, 0.8)),
    "tilt": ((-30.0, -14.0), (14.0, 30.0)),
}
# Everything "broad" can draw (competitors see all of it).
FULL_RANGES: dict[str, tuple[float, float]] = {
    "scale": (0.3, 3.0), "color_shift": (-180.0, 180.0), "occlusion": (0.0, 0.55),
    "clutter": (0, 40), "horizon": (0.12, 0.8), "tilt": (-30.0, 30.0),
}
# What a user may ask for explicitly.
VALID_RANGES: dict[str, tuple[float, float]] = {
    "scale": (0.05, 5.0), "color_shift": (-180.0, 180.0), "occlusion": (0.0, 0.9),
    "clutter": (0, 200), "horizon": (0.05, 0.95), "tilt": (-45.0, 45.0),
}
FACTORS: tuple[str, ...] = ("lighting",) + tuple(TRAIN_SLICE)



@dataclass(frozen=True)
class SceneConditions:
    """The conditions one scene is rendered under.

    lighting: 'day' | 'dusk' | 'night'.
    scale: object size multiplier (1 = real sizes; tiny < 0.5, huge > 2).
    color_shift: hue rotation of the whole image in degrees (YIQ), -180..180.
    occlusion: share of the frame covered by near occluders (foliage, a close car), 0..0.9.
    clutter: number of cars, people and extra poles in the street.
    horizon: horizon row as a fraction of the image height (camera pitch; 0.45 = level).
    tilt: camera roll in degrees.
    """

    lighting: str = "day"
    scale: float = 1.0
    color_shift: float = 0.0
    occlusion: float = 0.0
    clutter: int = 6
    horizon: float = 0.45
    tilt: float = 0.0

    def __post_init__(self) -> None:
        if self.lighting not in LIGHTINGS:
            raise ValueError(f"lighting: expected one of {list(LIGHTINGS)}, got {self.lighting!r}")
        for name, (lo, hi) in VALID_RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ValueError(f"{name}: expected a number in [{lo}, {hi}], got {value!r}")
            if not (lo <= float(value) <= hi):
                raise ValueError(f"{name}: expected a value in [{lo}, {hi}], got {value}")
        object.__setattr__(self, "clutter", int(self.clutter))
        for name in ("scale", "color_shift", "occlusion", "horizon", "tilt"):
            object.__setattr__(self, name, float(getattr(self, name)))

    @property
    def hard_factors(self) -> tuple[str, ...]:
        """Names of the factors outside the target's training slice (`TRAIN_SLICE`, day light)."""
        out = ["lighting"] if self.lighting != "day" else []
        for name, (lo, hi) in TRAIN_SLICE.items():
            if not (lo <= getattr(self, name) <= hi):
                out.append(name)
        return tuple(out)

    @property
    def is_hard(self) -> bool:
        """True when any factor lies outside the target's training slice."""
        return bool(self.hard_factors)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the condition fields (JSON/CSV friendly)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SceneConditions":
        """Inverse of `to_dict`; values may be strings (CSV); keys other than fields are ignored."""
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in d:
                v = d[f.name]
                kwargs[f.name] = v if f.name == "lighting" else (int(float(v)) if f.name == "clutter" else float(v))
        return cls(**kwargs)


# ----------------------------------------------------------------------------- sampling

def _uniform(rng: np.random.Generator, name: str, lo: float, hi: float) -> float | int:
    if name == "clutter":
        return int(rng.integers(int(lo), int(hi) + 1))
    return float(rng.uniform(lo, hi))


def sample_conditions(
    rng: np.random.Generator, distribution: str, *, hard_fraction: float = POOL_HARD_FRACTION
) -> SceneConditions:
    """Draw scene conditions.

    distribution:
      "train" — the target's narrow slice (day, normal scale, little colour shift, ...);
      "hard"  — the slice with one (70%) or two (30%) factors moved clearly outside it;
      "pool"  — "hard" with probability `hard_fraction` (default 5%), else "train", so that
                target failures are rare in an unlabeled pool;
      "broad" — each factor independently from the slice or from its full range (competitors).
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    check_distribution(distribution)
    if not 0.0 <= hard_fraction <= 1.0:
        raise ValueError(f"hard_fraction: expected a value in [0, 1], got {hard_fraction}")
    if distribution == "pool":
        distribution = "hard" if rng.random() < hard_fraction else "train"
    values: dict[str, Any] = {"lighting": "day"}
    for name, (lo, hi) in TRAIN_SLICE.items():
        values[name] = _uniform(rng, name, lo, hi)
    if distribution == "hard":
        k = 1 if rng.random() < 0.7 else 2
        for name in rng.choice(np.array(FACTORS), size=k, replace=False):
            name = str(name)
            if name == "lighting":
                values[name] = str(rng.choice(["dusk", "night"]))
            else:
                ranges = HARD_RANGES[name]
                lo, hi = ranges[int(rng.integers(len(ranges)))]
                values[name] = _uniform(rng, name, lo, hi)
    elif distribution == "broad":
        values["lighting"] = str(rng.choice(list(LIGHTINGS)))
        for name, (lo, hi) in FULL_RANGES.items():
            if rng.random() < 0.5:
                values[name] = _uniform(rng, name, lo, hi)
    return SceneConditions(**values)




def check_size(size: Any) -> int:
    """A scene side in pixels: an int in [16, 2048], else ValueError."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not 16 <= size <= 2048:
        raise ValueError(f"size: expected an int in [16, 2048], got {size!r}")
    return int(size)


def check_distribution(distribution: Any) -> str:
    """One of DISTRIBUTIONS, else ValueError."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution: expected one of {list(DISTRIBUTIONS)}, got {distribution!r}")
    return str(distribution)
