"""A minimal project for app tests: placeholder checkpoints and empty data folders (nothing is trained)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from blindspots.config import Config, DataSettings, ModelSettings, PoolSettings
from blindspots.loop.project import Project


def minimal_project(tmp_path: Path, *, pool_image: bool = False) -> Project:
    """Project at tmp_path/proj with target + one competitor; pool_image: put one 8x8 image in the pool."""
    for name in ("target.pt", "comp.pt"):
        (tmp_path / name).write_bytes(b"checkpoint")
    for d in ("pool", "train/images", "train/masks", "val/images", "val/masks"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    if pool_image:
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "pool" / "a.png")
    cfg = Config(pool=PoolSettings(root="pool"), target=ModelSettings("target", "target.pt"),
                 data=DataSettings(train="train", val="val"), competitors=[ModelSettings("comp", "comp.pt")],
                 base_dir=tmp_path)
    return Project.create(tmp_path / "proj", cfg)
