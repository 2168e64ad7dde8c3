"""Scene sets: per-scene seeds, in-memory arrays and resumable folders, rendered in worker processes."""
from __future__ import annotations

import csv
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from blindspots._validation import check_seed
from blindspots.atomic import write_atomic
from blindspots.data.scenes.conditions import (SCENE_CLASSES, SceneConditions, check_distribution,
                                               check_size, sample_conditions)
from blindspots.data.scenes.render import render_scene
from blindspots.data.segsets import SegmentationSet

logger = logging.getLogger(__name__)


def scene_seeds(n: int, seed: int) -> np.ndarray:
    """Per-scene seeds of a set, int64 [n]; scene i's seed does not depend on n."""
    seed = check_seed(seed)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n: expected a non-negative int, got {n!r}")
    return np.array([int(np.random.SeedSequence([seed, i]).generate_state(1)[0]) for i in range(int(n))],
                    dtype=np.int64)


def scene_set_conditions(n: int, *, seed: int, distribution: str) -> list[SceneConditions]:
    """Conditions of the scenes `generate_scene_set(n, seed=seed, distribution=...)` renders (no rendering)."""
    check_distribution(distribution)
    return [sample_conditions(np.random.default_rng([int(s), 0]), distribution) for s in scene_seeds(n, seed)]


def _check_jobs(n_jobs: Any) -> int:
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer)) or n_jobs == 0 or n_jobs < -1:
        raise ValueError(f"n_jobs: expected a positive int or -1 (all cores), got {n_jobs!r}")
    return (os.cpu_count() or 1) if n_jobs == -1 else int(n_jobs)


def _render_chunk(seeds: list[int], size: int, distribution: str) -> list[tuple[np.ndarray, np.ndarray, SceneConditions]]:
    out = []
    for s in seeds:
        sc = render_scene(s, size, distribution=distribution)
        out.append((sc.image, sc.mask, sc.conditions))
    return out


def _write_chunk(items: list[tuple[int, int]], out: str, size: int, distribution: str) -> list[SceneConditions]:
    conds = []
    for i, s in items:
        sc = render_scene(s, size, distribution=distribution)
        _save_png_atomic(sc.image, Path(out) / "images" / f"{_scene_id(i)}.png")
        _save_png_atomic(sc.mask, Path(out) / "masks" / f"{_scene_id(i)}.png")
        conds.append(sc.conditions)
    return conds


def _run_chunks(fn: Callable[..., list], chunks: list[list], args: tuple, n_jobs: int, bar: Any) -> list[list]:
    """fn(chunk, *args) for every chunk, in order; in `n_jobs` processes when > 1 (results are
    identical: every scene depends only on its own seed)."""
    if n_jobs <= 1 or len(chunks) <= 1:
        results = []
        for ch in chunks:
            results.append(fn(ch, *args))
            bar.update(len(ch))
        return results

    # forkserver: workers never inherit a parent's torch/BLAS thread pools mid-use
    with ProcessPoolExecutor(max_workers=n_jobs, mp_context=multiprocessing.get_context("forkserver")) as ex:
        futures = [ex.submit(fn, ch, *args) for ch in chunks]
        try:
            results = []
            for ch, fut in zip(chunks, futures):
                results.append(fut.result())
                bar.update(len(ch))
        except BaseException:  # interrupted: drop queued work; finished files stay (resumable)
            ex.shutdown(wait=False, cancel_futures=True)
            raise
    return results


def _chunked(items: list, n_jobs: int) -> list[list]:
    size = 32 if n_jobs > 1 else max(len(items), 1)
    return [items[i:i + size] for i in range(0, len(items), size)]


def render_scene_arrays(
    n: int, *, seed: int, distribution: str, size: int = 128, progress: bool = False, n_jobs: int = 1
) -> tuple[np.ndarray, np.ndarray, list[SceneConditions]]:
    """Render a set in memory: images uint8 [n, size, size, 3], masks uint8 [n, size, size], conditions.

    Scene i equals scene i of `generate_scene_set(..., seed=seed, distribution=distribution, size=size)`.
    n_jobs: worker processes (-1: all cores); the result does not depend on it.
    """
    check_distribution(distribution)
    size = check_size(size)
    jobs = _check_jobs(n_jobs)
    seeds = [int(s) for s in scene_seeds(n, seed)]
    images = np.empty((len(seeds), size, size, 3), np.uint8)
    masks = np.empty((len(seeds), size, size), np.uint8)
    conds: list[SceneConditions] = []
    with tqdm(total=len(seeds), desc=f"scenes ({distribution})", disable=not progress, leave=False) as bar:
        results = _run_chunks(_render_chunk, _chunked(seeds, jobs), (int(size), distribution), jobs, bar)
    for i, (img, msk, cond) in enumerate(r for chunk in results for r in chunk):
        images[i], masks[i] = img, msk
        conds.append(cond)
    return images, masks, conds


def _save_png_atomic(arr: np.ndarray, path: Path) -> None:
    write_atomic(path, lambda t: Image.fromarray(arr).save(t, format="PNG"))


def _scene_id(i: int) -> str:
    return f"scene_{i:06d}"


CONDITIONS_CSV = "conditions.csv"


def generate_scene_set(
    out_dir: str | Path,
    n: int,
    *,
    seed: int,
    distribution: str,
    size: int = 128,
    progress: bool = True,
    n_jobs: int = 1,
) -> "SegmentationSet":
    """Write a labelled scene set and return it as a SegmentationSet.

    Writes `out_dir/images/<id>.png` (RGB), `out_dir/masks/<id>.png` (index PNG, SCENE_CLASSES ids)
    and `out_dir/conditions.csv` (id, seed, every condition field, is_hard, hard_factors).
    ids are `scene_000000`, ... Resumable: scenes whose image and mask already exist are skipped
    (files are written atomically), so an interrupted run continues where it stopped.
    n_jobs: worker processes (-1: all cores); the files do not depend on it.
    """
    check_distribution(distribution)
    size = check_size(size)
    jobs = _check_jobs(n_jobs)
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "masks").mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in scene_seeds(n, seed)]
    todo = [(i, s) for i, s in enumerate(seeds)
            if not ((out / "images" / f"{_scene_id(i)}.png").exists() and (out / "masks" / f"{_scene_id(i)}.png").exists())]
    if len(todo) < len(seeds):
        logger.info("generate_scene_set: %d of %d scenes already on disk, kept", len(seeds) - len(todo), len(seeds))
    with tqdm(total=len(seeds), initial=len(seeds) - len(todo), desc=f"scenes ({distribution})",
              disable=not progress) as bar:
        _run_chunks(_write_chunk, _chunked(todo, jobs), (str(out), int(size), distribution), jobs, bar)
    rows = []
    for i, s in enumerate(seeds):
        cond = sample_conditions(np.random.default_rng([s, 0]), distribution)  # cheap; same draw as rendering
        rows.append({"id": _scene_id(i), "seed": s, **cond.to_dict(), "is_hard": cond.is_hard,
                     "hard_factors": "|".join(cond.hard_factors)})
    names = ["id", "seed"] + [f.name for f in fields(SceneConditions)] + ["is_hard", "hard_factors"]

    def write_csv(tmp: Path) -> None:
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=names)
            writer.writeheader()
            writer.writerows(rows)

    write_atomic(out / CONDITIONS_CSV, write_csv)
    return SegmentationSet(out / "images", out / "masks", classes=SCENE_CLASSES)


def read_conditions(set_dir: str | Path) -> dict[str, SceneConditions]:
    """id -> SceneConditions from a set's conditions.csv."""
    path = Path(set_dir) / CONDITIONS_CSV
    if not path.is_file():
        raise ValueError(f"set_dir: expected a folder with {CONDITIONS_CSV}, got {str(set_dir)!r}")
    with open(path, newline="") as fh:
        return {row["id"]: SceneConditions.from_dict(row) for row in csv.DictReader(fh)}
