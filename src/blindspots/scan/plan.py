"""What a scan has to do: the ids, their shards, and per shard what is still missing (resume).

Shard k holds ids[k*S:(k+1)*S] of the sorted scan ids (S = shard size). A shard's part (meta,
a model's columns, a pair's distances) is done when its Parquet file exists, since files are
only ever written whole; planning again after an interruption yields just the missing parts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from blindspots.scan.layout import ScanLayout


@dataclass
class ShardPlan:
    """What is missing for shard k."""

    k: int
    ids: list[str]
    need_meta: bool
    run: list[str]  # models to run on the images
    pairs: list[str]  # competitors whose (target, competitor) pair shard is missing

    @property
    def needs_images(self) -> bool:
        return self.need_meta or bool(self.run)

    @property
    def todo(self) -> bool:
        return self.need_meta or bool(self.run) or bool(self.pairs)


def num_shards(n_ids: int, shard_size: int) -> int:
    return (n_ids + shard_size - 1) // shard_size


def scan_ids(pool: Any) -> list[str]:
    """Every id the scan gives a row, sorted: the pool's images and the files it refused to read
    (`pool.refused`: links leaving the pool, dangling links), which become error rows."""
    return sorted(set(pool.ids) | set(getattr(pool, "refused", None) or {}))


def plan_shards(layout: ScanLayout, ids: list[str], shard_size: int, models: Mapping[str, Any], target: str,
                comps: list[str], n_shards: int, save_maps: bool) -> list[ShardPlan]:
    """One ShardPlan per shard (done ones included: `todo` is False for them).

    A pair against maps that are neither computed now nor saved needs its model run again;
    ValueError when that model was not given.
    """
    plans = []
    for k in range(n_shards):
        shard_ids = ids[k * shard_size:(k + 1) * shard_size]
        run = [m for m in models if not layout.model_shard(m, k).exists()]
        pairs = [g for g in comps if not layout.pair_shard(target, g, k).exists()]
        for m in [target] + pairs if pairs else []:
            if m not in run and not save_maps:
                if m not in models:
                    raise ValueError(f"competitors: {m!r} has no saved maps in out_dir (save_maps=False) and no "
                                     f"model was given to recompute them; pass it in models")
                run.append(m)
        for m in [target] + pairs if pairs else []:
            if m not in run and m not in models and not layout.model_shard(m, k).exists():
                raise ValueError(f"competitors: {m!r} is not finished in out_dir (shard {k} missing) and no model "
                                 f"was given to compute it; pass it in models")
        plans.append(ShardPlan(k, shard_ids, not layout.meta_shard(k).exists(), run, pairs))
    return plans
