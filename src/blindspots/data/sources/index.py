"""The id index of shard sources (an Arrow table sorted by id) and reads grouped by shard."""
from __future__ import annotations

from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from blindspots.data.sources.base import RawItem

__all__ = ["lookup", "read_by_shard", "source_index"]


def lookup(index: pa.Table, ids: Sequence[str], columns: Sequence[str]) -> dict[str, np.ndarray]:
    """The index's `columns` for each id, as numpy arrays [len(ids)]; 'shard' is -1 for an unknown id."""
    pos = pc.index_in(pa.array(list(ids), pa.string()), value_set=index.column("id"))
    found = pos.is_valid().to_numpy(zero_copy_only=False)
    p = pos.fill_null(0).to_numpy(zero_copy_only=False)
    out = {c: index.column(c).to_numpy()[p] for c in columns}
    out["shard"] = np.where(found, index.column("shard").to_numpy()[p], -1)
    return out


def read_by_shard(ids: Sequence[str], shard: np.ndarray,
                  read_run: Callable[[int, int, int], Iterator[RawItem]]) -> Iterator[RawItem]:
    """RawItems of `ids` in order; each run of consecutive ids in one shard k is read by read_run(k, start, end)."""
    s = 0
    while s < len(ids):
        e = s + 1
        while e < len(ids) and shard[e] == shard[s]:
            e += 1
        if shard[s] < 0:
            for i in range(s, e):
                yield RawItem(ids[i], None, "not in the pool's shards")
        else:
            yield from read_run(int(shard[s]), s, e)
        s = e


def source_index(source: object) -> pa.Table:
    """A shard source's id index (`source._index`), listing the source first if it has not been."""
    if getattr(source, "_index") is None:
        source.id_array  # type: ignore[attr-defined]
    return getattr(source, "_index")
