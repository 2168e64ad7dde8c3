"""What a scan has to do: the ids, their shards, and per shard what is still missing (resume).

Shard k holds ids[k*S:(k+1)*S] of the sorted scan ids (S = shard size). A shard's part (meta,
a model's columns, a pair's distances) is done when its Parquet file exists, since files are
only ever written whole; planning again after an interruption yields just the missing parts.

Scale: the ids are one Arrow string array (`scan_id_array`); each plan holds an `IdSlice` of it,
which becomes Python strings only when its shard is read. Planning 10^6 ids holds no per-id Python
object, and a resumed scan's plan is the stat of each shard file (no pool listing: `scan.manifest`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from blindspots.scan.layout import ScanLayout


class IdSlice(Sequence[str]):
    """A shard's ids as a read-only sequence of str over a slice of the scan's Arrow id array
    (zero-copy; Python strings are made on access). Pickles as a plain list of its ids."""

    def __init__(self, ids: pa.Array) -> None:
        self._ids = ids
        self._list: list[str] | None = None

    def _py(self) -> list[str]:
        if self._list is None:
            self._list = self._ids.to_pylist()
        return self._list

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, i: Any) -> Any:
        return self._py()[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self._py())

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, tuple, IdSlice)) else NotImplemented

    def __repr__(self) -> str:
        return f"IdSlice({len(self)} ids)"

    def __reduce__(self) -> tuple:
        return list, (self._py(),)


@dataclass
class ShardPlan:
    """What is missing for shard k."""

    k: int
    ids: Sequence[str]  # a list, or an IdSlice of the scan's id array
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
    (`pool.refused`: links leaving the pool, dangling links, unreadable shards), which become error rows."""
    return scan_id_array(pool).to_pylist()


def scan_id_array(pool: Any) -> pa.Array:
    """`scan_ids` as one sorted Arrow string array (a pool source's `id_array` when it has one)."""
    ids = pool.id_array if hasattr(pool, "id_array") else pa.array(list(pool.ids), pa.string())
    refused = getattr(pool, "refused", None) or {}
    if refused:
        ids = pa.concat_arrays([ids.cast(pa.string()), pa.array(sorted(refused), pa.string())])
    elif len(ids) < 2 or pc.all(pc.less(ids.slice(0, len(ids) - 1), ids.slice(1))).as_py():
        return ids  # already sorted and unique (every source's id_array)
    ids = pc.unique(ids)
    return ids.take(pc.sort_indices(ids))


def plan_shards(layout: ScanLayout, ids: Sequence[str] | pa.Array, shard_size: int, models: Mapping[str, Any],
                target: str, comps: list[str], n_shards: int, save_maps: bool) -> list[ShardPlan]:
    """One ShardPlan per shard (done ones included: `todo` is False for them).

    A pair against maps that are neither computed now nor saved needs its model run again;
    ValueError when that model was not given.
    """
    plans = []
    arrow = isinstance(ids, pa.Array)
    for k in range(n_shards):
        start = k * shard_size
        shard_ids = IdSlice(ids.slice(start, shard_size)) if arrow else ids[start:start + shard_size]
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
