"""Surprise over a whole pool, as `blindspots surprise fit | score` run it and a notebook calls it:
`fit_estimator` fits per-class SA models on a labelled set and records how its traces were taken (a JSON
sidecar beside the `.npz`), `score_pool` scores every image of a pool with them, into a Parquet file or as
resumable columns of a scan's score table (`extra/surprise_<kind>__<name>/`, locally or on Ray)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from blindspots.batches import size_batches
from blindspots.data.segsets import SegmentationSet
from blindspots.data.sources import open_pool
from blindspots.models.load import load_features, load_model
from blindspots.models.spec_syntax import absolute_spec
from blindspots.scan.extra import add_columns, claim_part
from blindspots.scan.manifest import load_manifest
from blindspots.surprise.estimators import load_estimator, make_estimator
from blindspots.surprise.image import collect_fit_traces, surprise_columns
from blindspots.surprise.traces import TraceExtractor

__all__ = ["fit_estimator", "score_pool", "fitted_extractor", "check_same_source"]


def extractor(model: str, layer: str | None, interpolation: str, batch_size: int,
              features: str | None = None) -> TraceExtractor:
    """The trace extractor of a model spec (features from `features`, a folder or 'module:function', if given)."""
    source = load_features(features) if features else None
    return TraceExtractor(load_model(model, batch_size=batch_size), layer, features=source,
                          interpolation=interpolation)


def sidecar(estimator: str | Path) -> dict:
    """What `fit_estimator` recorded beside the estimator (model, layer, interpolation, kind, features)."""
    path = Path(estimator).with_suffix(".json")
    return json.loads(path.read_text()) if path.is_file() else {}


def fitted_extractor(estimator: str | Path, model: str | None = None, batch_size: int = 16,
                     features: str | None = None) -> TraceExtractor:
    """The trace extractor recorded at fit (model spec, layer, interpolation, features); `model` and
    `features` override the recorded ones (e.g. the pool's own precomputed feature folder)."""
    meta = sidecar(estimator)
    spec = model or meta.get("model", "")
    if not spec:
        raise ValueError(f"model: expected a model spec (none was recorded beside {str(estimator)!r}), got none")
    return extractor(spec, meta.get("layer"), meta.get("interpolation", "bilinear"), batch_size,
                     features or meta.get("features"))


def check_same_source(estimators: list[Path]) -> None:
    """Several estimators scored with the first one's extractor: estimators fitted on another model,
    layer, interpolation or feature source would be scored on traces they never saw (silently wrong)."""
    keys = ("model", "layer", "interpolation", "features")
    first = {k: sidecar(estimators[0]).get(k) for k in keys}
    for path in estimators[1:]:
        meta = sidecar(path)
        if not meta:
            continue
        got = {k: meta.get(k) for k in keys}
        if got != first and sidecar(estimators[0]):
            raise ValueError(f"estimator (--estimator): expected estimators fitted on one model and layer (all are scored "
                             f"with the first one's traces: {first}), got {got} for {str(path)!r}")


def fit_estimator(model: str, images: str | Path, masks: str | Path, out: str | Path, *, kind: str = "mdsa",
                  layer: str | None = None, features: str | None = None, interpolation: str = "bilinear",
                  max_images: int = 10_000, per_class: int = 100, cap: int = 10_000, seed: int = 0,
                  batch_size: int = 16) -> Any:
    """Fit one SA model per class on traces sampled from a labelled set (resumable: the traces are kept
    in `<out>.traces.npz`); write the estimator to `out` (.npz) and how its traces were taken beside it
    (.json, read by `score_pool`). Defaults are the surprise paper's. Returns the fitted estimator."""
    out, images, masks = Path(out), Path(images), Path(masks)
    ex = extractor(model, layer, interpolation, batch_size, features)
    data = SegmentationSet(images, masks)
    out.parent.mkdir(parents=True, exist_ok=True)
    x, y = collect_fit_traces(ex, data, max_images=max_images, per_class=per_class, cap=cap, seed=seed,
                              checkpoint=out.with_suffix(".traces.npz"),
                              checkpoint_key={"model": model, "features": features, "images": images.resolve(),
                                              "masks": masks.resolve()})
    est = make_estimator(kind).fit(x, y)
    est.save(out)
    meta = {"model": model, "layer": ex.layer, "interpolation": interpolation, "kind": kind, "traces": int(len(y))}
    if features:
        meta["features"] = features
    out.with_suffix(".json").write_text(json.dumps(meta, indent=1))
    return est


class PoolScorer:
    """`compute` of `scan.extra.add_columns` for surprise columns: picklable (paths and specs only), so
    that Ray tasks can run it; it loads the estimator and the extractor on its first call in a process and
    keeps them for that process's later shards (one load per Ray worker, not one per shard)."""

    _loaded: dict[tuple, tuple] = {}  # per process, by (estimator, model, batch size, features)

    def __init__(self, estimator: Path, model: str | None, batch_size: int, features: str | None, name: str,
                 per_class: int, seed: int) -> None:
        spec = model or sidecar(estimator).get("model", "")
        self.key = (str(estimator.resolve()), absolute_spec(spec, str(Path.cwd())) if spec else spec, batch_size,
                    features)
        self.name, self.per_class, self.seed = name, per_class, seed

    def loaded(self) -> tuple:
        """(estimator, trace extractor)."""
        if self.key not in self._loaded:
            est, model, batch_size, features = self.key
            self._loaded[self.key] = (load_estimator(Path(est)),
                                      fitted_extractor(Path(est), model or None, batch_size, features))
        return self._loaded[self.key]

    def __call__(self, images: np.ndarray, ids: list[str] | None = None) -> dict:
        est, ex = self.loaded()
        return surprise_columns(ex, est, images, self.name, per_class=self.per_class, seed=self.seed, ids=ids)


def score_pool(pool: Any, estimator: str | Path, *, scan: str | Path | None = None, out: str | Path | None = None,
               model: str | None = None, name: str | None = None, features: str | None = None,
               per_class: int = 1000, seed: int = 0, batch_size: int = 16, engine: str = "local",
               address: str | None = None) -> list[str] | pd.DataFrame:
    """Score every image of `pool` (a pool source, or what `data.sources.open_pool` opens) with a fitted
    estimator: image SA and class SA columns `surprise_<kind>__<name>[__<k>]`.

    scan: a scan folder of this pool: the columns join its score table (resumable, `engine` "local"
        or "ray" at `address`); returns the column names. out: a Parquet file instead (id, status,
        columns; unreadable images get status "error"); returns the table. Exactly one of the two.
    name: the model name in the column names (default: the scan's target, so that the surprise sampler
        finds them; else "target"). model / features: override the ones recorded at fit.
    """
    if (out is None) == (scan is None):
        raise ValueError(f"out / scan (--out / --scan): expected exactly one of them, got out={out}, scan={scan}")
    if engine != "local" and scan is None:
        raise ValueError(f"engine (--engine): expected 'local' when writing `out` (this process writes it), got {engine!r}")
    estimator = Path(estimator)
    if name is None:
        manifest = load_manifest(scan) if scan is not None else None
        name = str(manifest["target"]) if manifest and manifest.get("target") else "target"
    est = load_estimator(estimator)
    ex = fitted_extractor(estimator, model, batch_size, features)
    source = open_pool(pool) if isinstance(pool, (str, Path)) else pool
    if scan is not None:
        if ex.by_id:
            raise ValueError("scan (--scan): expected features computed from pixels (a model or a callable), got features "
                             "read by image id; score into `out` for precomputed feature maps")
        part = f"surprise_{est.name}__{name}"
        settings = {"estimator_sha256": hashlib.sha256(estimator.read_bytes()).hexdigest(),
                    "model": model or sidecar(estimator).get("model", ""),
                    "features": features or sidecar(estimator).get("features"), "per_class": per_class, "seed": seed}
        # add_columns resumes a part by its name: the record refuses another estimator or model in the same part
        claim_part(Path(scan) / "extra" / part, settings, "surprise.json", "name (--name)")
        scorer = PoolScorer(estimator, model, batch_size, features, name, per_class, seed)
        scorer._loaded[scorer.key] = (est, ex)  # this process has them loaded already
        return add_columns(scan, source, part, scorer, batch_size=batch_size, engine=engine, ray_address=address)
    return _score_to_file(source, Path(out), lambda images, ids: surprise_columns(
        ex, est, images, name, per_class=per_class, seed=seed, ids=ids), batch_size)


def _score_to_file(source: Any, out: Path, compute: Any, batch_size: int) -> pd.DataFrame:
    """Stream the pool (batches of one image size in memory), score each batch, write one Parquet file."""
    rows: list[pd.DataFrame] = []

    def readable() -> Iterator[tuple[str, np.ndarray]]:
        for it in source.iter_items(progress=True):
            if it.image is None:
                rows.append(pd.DataFrame({"id": [it.id], "status": "error"}))
                continue
            yield it.id, it.image

    for group in size_batches(readable(), lambda g: g[1].shape, max_images=batch_size):
        ids = [g[0] for g in group]
        rows.append(pd.DataFrame({"id": ids, "status": "ok", **compute(np.stack([g[1] for g in group]), ids)}))
    if not rows:
        raise ValueError(f"pool: expected images in {str(getattr(source, 'root', source))!r}, got none")
    table = pd.concat(rows, ignore_index=True).sort_values("id").reset_index(drop=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out, index=False)
    return table
