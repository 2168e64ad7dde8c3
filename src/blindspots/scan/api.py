"""`scan_pool`: stream a pool once through a target and m competitors; write the score table.

Checks the inputs, writes the manifest, plans the shards still to do (`scan.plan`) and hands
them to an engine (`scan.engines.local`: threads on this machine; `scan.engines.ray`: Ray Data
tasks and actors on a cluster). Killed at any moment and started again, with either engine, the
scan redoes only the unfinished shards and ends with the same table as an uninterrupted run.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from tqdm.auto import tqdm

from blindspots import ids as id_rules
from blindspots.batches import DEFAULT_MAX_PIXELS, BatchLimits, check_max_pixels
from blindspots.data.classes import Classes
from blindspots.models.protocol import reads_ids
from blindspots.scan.engines.autobatch import AUTO, auto_limits, check_batch_size, probe_size
from blindspots.scan.engines.decoding import check_decode_workers
from blindspots.scan.engines.job import ScanJob, on_gpu
from blindspots.scan.engines.local import run_local
from blindspots.scan.engines.ray import import_ray, run_ray
from blindspots.scan.fingerprint import model_fingerprint, model_settings
from blindspots.scan.layout import ScanLayout
from blindspots.scan.manifest import (IDS_FILE, SCAN_VERSION, ids_digest, load_manifest, merge_manifest, save_ids,
                                      save_manifest, stored_ids)
from blindspots.scan.plan import num_shards, plan_shards, scan_id_array
from blindspots.scan.schema import check_model_name

log = logging.getLogger(__name__)

ENGINES = ("local", "ray")


def _validate(pool: Any, models: Mapping[str, Any], target: str, competitors: Sequence[str] | None,
              batch_size: int | str, shard_size: int, resize: tuple[int, int] | None, manifest: dict | None) -> list[str]:
    for attr in ("ids", "iter_items", "root"):
        if attr not in dir(pool):  # dir, not hasattr: a source's `ids` lists the pool when read
            raise ValueError(f"pool: expected an ImagePool (with .ids, .iter_items, .root), got {type(pool).__name__}")
    if not isinstance(models, Mapping) or not models:
        raise ValueError(f"models: expected a non-empty dict name -> Segmenter, got {models!r}")
    for name, m in models.items():
        check_model_name(name)
        if not hasattr(m, "predict_proba") or not hasattr(m, "num_classes"):
            raise ValueError(f"models[{name!r}]: expected a Segmenter (num_classes, predict_proba), "
                             f"got {type(m).__name__}")
        if resize is not None and reads_ids(m):
            raise ValueError(f"resize: expected None when a model reads precomputed probabilities "
                             f"({name!r}), got {resize}")
    sizes = {name: int(m.num_classes) for name, m in models.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"models: expected one label space (equal num_classes), got {sizes}")
    check_model_name(target, "target")
    if target not in models:
        raise ValueError(f"target: expected one of the given models {sorted(models)}, got {target!r}")
    known = set(models) | set((manifest or {}).get("models", {}))
    comps = [m for m in models if m != target] if competitors is None else list(competitors)
    for g in comps:
        check_model_name(g, "competitors")
        if g == target or g not in known:
            raise ValueError(f"competitors: expected names of other models given or already scanned into "
                             f"out_dir {sorted(known - {target})}, got {g!r}")
    if not comps:
        log.warning("scan without competitors: only per-model statistics, no pair distances")
    check_batch_size(batch_size)
    if int(shard_size) < 1:
        raise ValueError(f"shard_size: expected a positive integer, got {shard_size}")
    if resize is not None and (len(resize) != 2 or min(resize) < 1):
        raise ValueError(f"resize: expected (height, width) of positive integers or None, got {resize}")
    return comps


def pool_root(pool: Any) -> str:
    """Where the pool is, for the manifest: a URI as given, a local folder made absolute."""
    root = str(pool.root)
    return root if "://" in root else str(Path(root).resolve())


def class_names(model: Any, num_classes: int) -> list[str]:
    """A model's class names (`model.classes.names`), or class_0..class_{C-1} when it has none."""
    names = getattr(getattr(model, "classes", None), "names", None)
    if names is not None and len(names) == num_classes:
        return [str(n) for n in names]
    return [f"class_{k}" for k in range(num_classes)]


def scan_pool(
    pool: Any,
    models: Mapping[str, Any],
    out_dir: str | Path,
    *,
    target: str,
    competitors: Sequence[str] | None = None,
    batch_size: int | str = 16,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    shard_size: int = 256,
    save_maps: bool = True,
    resize: tuple[int, int] | None = None,
    classes: Classes | None = None,
    prefetch: int = 4,
    progress: bool = True,
    engine: str = "local",
    ray_address: str | None = None,
    actors: int | None = None,
    gpus_per_actor: float | None = None,
    decode_workers: int | None = None,
) -> Path:
    """Stream `pool` once through the target and its competitors; write the score table.

    pool: an `ImagePool` (or any object with sorted `.ids`, `.iter_items(ids)` and `.root`; optional
        `.refused` (id -> reason: files it will not read, e.g. links leaving the pool, given error
        rows) and `.content_hash(id)` (the `content_hash` column)).
    models: name -> Segmenter (`predict_proba(uint8 [N, H, W, 3]) -> float32 [N, C, H, W]`, or a
        precomputed model reading by ids, `reads_ids`); names match [a-z0-9_]+ (no "__").
        A model that raises on some images gives those images status 'error' with its message;
        one that fails on every image it is given stops the scan with a ValueError naming it.
    target: the model under test, T. competitors: the models it is compared with, G_1..G_m
        (default: every other model in `models`). A competitor already scanned into `out_dir`
        may be named without passing the model: its columns and saved maps are reused
        (Algorithm 1: competitors are run once, line 3; a new target only once, line 7).
    batch_size: at most this many images per forward pass; max_pixels: at most this many pixels
        per forward pass (None: no budget), so that memory stays bounded on pools of large photos
        (`blindspots.batches.size_batches`; on the README's photo example the default takes the
        peak from 5.8 GB to 2.7 GB). Batches hold images of one size (varied pools are grouped per size within a
        shard). batch_size="auto": sized from the free memory of the GPU the models run on, and
        logged (`blindspots.scan.engines.autobatch`; max_pixels is then that choice's budget);
        16 images where no model is on a GPU. shard_size: images per Parquet shard (resume unit).
    save_maps: write each model's argmax map as an index PNG `out_dir/maps/<M>/<artifact name>`
        (`blindspots.ids.artifact_name`: "a/cat.jpg" -> "a/cat.png").
    resize: (height, width) to resize every image to before inference (maps are at that size;
        width/height columns keep the original size). None: native size.
    engine: "local" (threads on this machine) or "ray" (Ray Data: decode tasks, model actors; needs
        `pip install 'blindspots[ray]'`, see docs/ray.md). Both write the same files.
    ray_address: the Ray cluster for engine="ray" ("auto", "host:6379", "ray://host:10001"); None:
        the Ray this process is connected to, or a new local one. actors: model actors for
        engine="ray" (default: one per cluster CPU; with gpus_per_actor, as many as the cluster's GPUs
        hold); each loads every model once. gpus_per_actor: GPUs each model actor asks Ray for (e.g. 1
        or 0.5); the actors' models then load on their GPU (a spec's device=auto).
    decode_workers: threads that decode the images for engine="local" (None: one per core, at most
        4, measured best on a GPU scan; 1: one reader thread, as before). Images reach the models in id
        order whatever the count, so the score table is the same bits (`blindspots.scan.engines.decoding`).
        Each thread holds the image it decodes (4 photos of 13 MP: 0.16 GB).
    classes: the label space recorded in scan.json (default: the target's `.classes` if any).
        Each model's own class names are recorded under models.<M>.classes.
    Returns out_dir. See `blindspots.scan.schema` for the columns and `read_score_table`.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine: expected one of {ENGINES}, got {engine!r}")
    if actors is not None and (isinstance(actors, bool) or int(actors) < 1):
        raise ValueError(f"actors: expected a positive integer or None, got {actors!r}")
    if gpus_per_actor is not None and (isinstance(gpus_per_actor, bool) or not float(gpus_per_actor) > 0):
        raise ValueError(f"gpus_per_actor: expected a positive number or None, got {gpus_per_actor!r}")
    workers = check_decode_workers(decode_workers)
    if engine == "ray":
        import_ray()  # before anything is written: say how to install it
    out = Path(out_dir)
    old = load_manifest(out)
    comps = _validate(pool, models, target, competitors, batch_size, shard_size, resize, old)
    check_max_pixels(max_pixels)
    ids = stored_ids(out, old, pool)  # a resume on the same, unchanged source: no listing
    if ids is None:
        ids = scan_id_array(pool)
        if len(ids) and save_maps:
            id_rules.check_unique_artifacts(ids, "pool")
    if not len(ids):
        raise ValueError(f"pool: expected at least one image, got an empty pool at {pool.root}")
    if check_batch_size(batch_size) == AUTO:
        first = ids.slice(0, 8).to_pylist() if hasattr(ids, "slice") else list(ids[:8])
        limits = auto_limits(models, lambda: probe_size(pool, first, resize))
    else:
        limits = BatchLimits(int(batch_size), max_pixels)
    num_classes = int(next(iter(models.values())).num_classes)
    classes = classes or getattr(models[target], "classes", None) or \
        Classes(tuple(f"class_{k}" for k in range(num_classes)))
    if classes.num_classes != num_classes:
        raise ValueError(f"classes: expected {num_classes} classes (the models' num_classes), "
                         f"got {classes.num_classes}")
    manifest = merge_manifest(old, {
        "version": SCAN_VERSION, "pool_root": pool_root(pool), "n_images": len(ids),
        "pool_source": pool.describe() if hasattr(pool, "describe") else None,
        "pool_fingerprint": pool.fingerprint() if hasattr(pool, "fingerprint") else None,
        "ids_sha256": ids_digest(ids), "shard_size": int(shard_size), "n_shards": num_shards(len(ids), shard_size),
        "num_classes": num_classes, "classes": classes.to_dict(), "save_maps": bool(save_maps),
        "resize": list(resize) if resize else None, "target": target, "competitors": comps,
        "models": {name: {"kind": type(m).__name__, "fingerprint": model_fingerprint(m),
                          "settings": model_settings(m), "classes": class_names(m, num_classes)}
                   for name, m in models.items()},
    })
    layout = ScanLayout(out)
    plans = plan_shards(layout, ids, int(shard_size), models, target, comps, manifest["n_shards"], save_maps)
    save_manifest(out, manifest)
    if not (out / IDS_FILE).exists():
        save_ids(out, ids)
    todo = [p for p in plans if p.todo]
    done_images = len(ids) - sum(len(p.ids) for p in todo)
    running = [m for m in models if any(m in p.run for p in todo)] or [target]
    log.info("scan %s: %d of %d shards to do", out, len(todo), len(plans))
    with tqdm(total=len(ids), initial=done_images, unit="img", desc=f"scan {', '.join(running)}",
              disable=not progress) as bar:
        job = ScanJob(pool, models, layout, target, num_classes, limits, resize, bool(save_maps),
                      pin_memory=any(on_gpu(m) for m in models.values()), decode_workers=workers)
        if engine == "ray":
            for p in todo:  # Ray Data carries each shard's ids as a plain list column
                p.ids = list(p.ids)
            run_ray(job, todo, bar, address=ray_address, actors=actors, gpus_per_actor=gpus_per_actor)
        else:
            run_local(job, todo, bar, prefetch=max(1, int(prefetch)))
    return out
