"""Step ``scan``: score the pool with the target f_t^(i) (and, once, the competitors)."""
from __future__ import annotations

import pandas as pd

from blindspots.loop.context import LoopContext, target_column
from blindspots.loop.project import ProjectError
from blindspots.loop.steps.base import Step
from blindspots.scan import scan_pool
from blindspots.scan.manifest import ids_digest
from blindspots.scan.plan import scan_ids
from blindspots.scan.table import load_manifest

__all__ = ["ScanStep", "check_same_pool"]


class ScanStep(Step):
    """The target `<target>_v<i>` into the project's one scan folder; competitors' finished shards
    are reused (Algorithm 1, line 7 reuses line 3's columns)."""

    name = "scan"

    def settings(self, ctx: LoopContext) -> dict:
        return {"batch_size": ctx.cfg.scan.batch_size, "shard_size": ctx.cfg.scan.shard_size}

    def run(self, ctx: LoopContext, i: int, seed: int) -> dict:
        p, c = ctx.project, ctx.cfg
        name = target_column(p, i)
        comps = [g.name for g in c.competitors]
        scanned = set((load_manifest(p.scan_dir) or {}).get("models", {}))
        # Competitors are always passed: the scan skips their finished shards and completes any
        # shard a crash left unfinished.
        check_same_pool(ctx)
        models = {name: ctx.segmenter(c.target.name, i)}
        models.update({g: ctx.segmenter(g, 0) for g in comps})
        scan_pool(ctx.pool, models, p.scan_dir, target=name, competitors=comps, batch_size=c.scan.batch_size,
                  shard_size=c.scan.shard_size, classes=ctx.classes, progress=ctx.progress)
        table = ctx.score_table(i)
        return {"target_column": name, "scanned": sorted(set(models) - (scanned & set(comps))),
                "reused": sorted(scanned & set(comps)),
                "n_images": int(len(table)), "n_errors": int((table["status"] != "ok").sum())}


def check_same_pool(ctx: LoopContext) -> None:
    """A project scans one pool in every round (one scan folder, one table). Photos added to or
    removed from it since the first scan: a ProjectError saying which and what to do (the scan's own
    error advises a new out_dir, which `round` does not take)."""
    manifest = load_manifest(ctx.project.scan_dir)
    ids = scan_ids(ctx.pool)
    if manifest is None or manifest.get("ids_sha256") == ids_digest(ids):
        return
    shards = sorted((ctx.project.scan_dir / "meta").glob("*.parquet"))
    old = set(pd.concat([pd.read_parquet(f, columns=["id"]) for f in shards])["id"]) if shards else set()
    added, removed = sorted(set(ids) - old), sorted(old - set(ids))
    raise ProjectError(
        f"pool.root: expected the {len(old)} images the project's first scan read, got {len(added)} added "
        f"and {len(removed)} removed since (e.g. added {added[:3]}, removed {removed[:3]}); every round scans "
        f"the same pool: put {str(ctx.pool.root)!r} back as it was, or create a new project on the new pool")
