"""The id index of shard sources (an Arrow table sorted by id) and reads grouped by shard."""
from __future__ import annotations

from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from blindspots.data.sources.base import RawItem, positions_in

__all__ = ["lookup", "read_by_shard", "source_index"]


def lookup(index: pa.Table, ids: Sequence[str], columns: Sequence[str]) -> dict[str, np.ndarray]:
    """The index's `columns` for each id, as numpy arrays [len(ids)]; 'shard' is -1 for an unknown id."""
    pos = positions_in(index.column("id").combine_chunks(), ids)
    found = pos >= 0
    p = np.where(found, pos, 0)
    out = {c: index.column(c).to_numpy()[p] for c in columns}
    out["shard"] = np.where(found, index.column("shard").to_numpy()[p], -1)
    return out


READ_GROUP = 1024  # ids grouped by shard per read: a few row groups / one tar span each, bytes held briefly


def read_by_shard(ids: Sequence[str], shard: np.ndarray,
                  read_run: Callable[[int, np.ndarray], Iterator[RawItem]],
                  group: int = READ_GROUP) -> Iterator[RawItem]:
    """RawItems of `ids` in the order asked. Each block of `group` ids is read shard by shard (read_run(k,
    positions) gets the positions in `ids` of shard k's ids), so ids that alternate between shards (sorted
    image paths of a dataset written round-robin) still cost one read per shard and row group, not per id."""
    for start in range(0, len(ids), group):
        block = np.arange(start, min(len(ids), start + group))
        order = block[np.argsort(shard[block], kind="stable")]
        got: dict[int, RawItem] = {}
        s = 0
        while s < len(order):
            e = s + 1
            while e < len(order) and shard[order[e]] == shard[order[s]]:
                e += 1
            run = order[s:e]
            if shard[run[0]] < 0:
                got.update((int(i), RawItem(ids[i], None, "not in the pool's shards")) for i in run)
            else:
                got.update(zip((int(i) for i in run), read_run(int(shard[run[0]]), run)))
            s = e
        for i in block:
            yield got.pop(int(i))


def source_index(source: object) -> pa.Table:
    """A shard source's id index (`source._index`), listing the source first if it has not been."""
    if getattr(source, "_index") is None:
        source.id_array  # type: ignore[attr-defined]
    return getattr(source, "_index")
