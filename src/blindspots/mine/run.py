"""Mine a finished scan folder: pick N images with one strategy and save the picks.

`mine_scan(scan_dir, "mad", 20)` reads the score table, builds the registered sampler with what
the scan knows (target, class names, and for MAD the class-size ranges from the target's own
predictions when no others are given) and returns the picks with a plain-language reason;
`write_picks` saves them as picks.csv and picks.parquet.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from blindspots.data.classes import Classes
from blindspots.mine.samplers.base import check_n
from blindspots.mine.samplers.mad import class_area_ranges_from_table
from blindspots.mine.model_columns.qbc_maps import with_vote_entropy
from blindspots.mine.reasons import describe
from blindspots.mine.samplers.registry import make_sampler, sampler_settings
from blindspots.scan import schema
from blindspots.scan.manifest import load_manifest
from blindspots.scan.table import read_score_table

log = logging.getLogger(__name__)

PICK_COLUMNS = ("rank", "id", "score", "reason", "details", "content_hash")


def mine_scan(scan_dir: str | Path, strategy: str = "mad", n: int | None = 20, *, target: str | None = None,
              seed: int = 0, ids: Iterable[str] | None = None, **settings: Any) -> pd.DataFrame:
    """Pick at most `n` images of a scan folder with `strategy` (`blindspots.mine.sampler_names()`).

    target: the scanned model under test (default: the scan's last target).
    ids: mine only these images of the scan (e.g. a FiftyOne view of it); MAD's class-size ranges
        then come from them too. An id that is not in the scan is a ValueError.
    settings: the strategy's own settings (e.g. n3, distance for MAD; kind for surprise). MAD and MAD+
        without `ranges` use `class_area_ranges_from_table` on the target's predictions.
    Returns a DataFrame in pick order with columns rank (1-based), id, score, reason (one
    sentence), details (the sampler's JSON reason), content_hash, then the strategy's extras.
    Exact duplicates (same content_hash) are picked once.
    """
    n = check_n(n)
    manifest = load_manifest(scan_dir)
    if manifest is None:
        raise ValueError(f"scan_dir: expected a scan folder with scan.json, got {str(scan_dir)!r}")
    if target is not None and target not in manifest.get("models", {}):
        raise ValueError(f"target: expected one of the scanned models {sorted(manifest.get('models', {}))}, "
                         f"got {target!r}")
    table = read_score_table(scan_dir, target=target)
    if ids is not None:
        keep = set(ids)
        missing = keep - set(table[schema.ID])
        if missing:
            raise ValueError(f"ids: expected ids of the scan in {str(scan_dir)!r}, got {len(missing)} others "
                             f"(first: {sorted(missing)[0]!r})")
        table = table[table[schema.ID].isin(keep)].reset_index(drop=True)
    # surprise columns carry the name given to `blindspots surprise score`: inferred unless asked
    explicit = target is not None or strategy != "surprise"
    target = target or manifest["target"]
    classes = Classes.from_dict(manifest["classes"]) if isinstance(manifest.get("classes"), dict) else None
    accepted = sampler_settings(strategy)
    given = dict(settings)
    if "target" in accepted and explicit:
        given.setdefault("target", target)
    if "classes" in accepted and classes is not None:
        given.setdefault("classes", classes)
    if strategy in ("mad", "madplus") and given.get("ranges") is None:
        given["ranges"] = class_area_ranges_from_table(table, target)
        log.info("MAD class-size ranges from %s's predictions on the pool: %s", target, given["ranges"].tolist())
    if strategy == "qbc" and given.get("measure", "vote") == "vote":  # no committee columns: the saved maps
        table = with_vote_entropy(scan_dir, table, given.get("target", target))
    sampler = make_sampler(strategy, **given)
    picks = sampler.select(table, n, seed=seed)
    names = classes.names if classes is not None else None
    hashes = table.set_index(schema.ID)[schema.CONTENT_HASH] if schema.CONTENT_HASH in table.columns else None
    out = picks.rename(columns={"reason": "details"})
    out.insert(0, "rank", range(1, len(out) + 1))
    out.insert(3, "reason", [describe(r, names) for r in out["details"]])
    out.insert(5, "content_hash", None if hashes is None else hashes.reindex(out["id"]).to_numpy(object))
    out = out.reset_index(drop=True)
    # for the gallery: whose maps explain these picks
    out.attrs = {"target": target, "competitors": [g for _, g in schema.distance_pairs(table.columns, "dpa")]}
    return out


def write_picks(picks: pd.DataFrame, out_dir: str | Path) -> tuple[Path, Path]:
    """Write `picks` as out_dir/picks.csv and out_dir/picks.parquet; returns both paths."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir: expected a folder (created if missing), got the file {str(out)!r}")
    out.mkdir(parents=True, exist_ok=True)
    csv, parquet = out / "picks.csv", out / "picks.parquet"
    picks.to_csv(csv, index=False)
    picks.to_parquet(parquet, index=False)
    return csv, parquet
