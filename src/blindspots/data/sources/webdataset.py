"""`TarSource`: WebDataset tar shards (`shard-{000000..000099}.tar`, a glob, a folder/prefix of .tar files).

WebDataset's sample rule: a member's key is its path up to the first '.' of its file name
('train/000017.seg.png' -> key 'train/000017', extension 'seg.png'); consecutive members with one key
form a sample. A sample's image is its first member whose last extension is an image extension
('jpg', 'png', 'webp', ...); samples without one are skipped. Ids: `<shard>#<key>`.

Listing walks each shard's headers once (member data is skipped by seeking, so an object store
serves the headers by ranges) and keeps (shard, data offset, size) per id in an Arrow table. Reads
are byte ranges: the span of a run of ids in one shard in one request when they lie close together.
A member cut short by a truncated shard is that id's error ('truncated tar member'); a shard that is
not a tar at all is one error row named by the shard.
"""
from __future__ import annotations

import logging
import posixpath
import tarfile
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from blindspots.data.sources.base import PoolSource, RawItem
from blindspots.data.sources.decode import DEFAULT_MAX_PIXELS, pillow_extensions
from blindspots.data.sources.fs import public_options
from blindspots.data.sources.index import lookup, read_by_shard, source_index
from blindspots.data.sources.patterns import ShardFiles, list_shards

log = logging.getLogger(__name__)

__all__ = ["TarSource", "split_key"]

SPAN_SLACK = 2.0  # read a run's whole span when it is at most this many times the bytes wanted


def split_key(name: str) -> tuple[str, str]:
    """WebDataset's split of a member name: ('train/000017', 'seg.png') for 'train/000017.seg.png'."""
    folder, base = posixpath.split(name)
    stem, _, ext = base.partition(".")
    return (posixpath.join(folder, stem) if folder else stem), ext.lower()


class TarSource(ShardFiles, PoolSource):
    """WebDataset tar shards (module docstring). storage_options: fsspec options for the store."""

    kind = "webdataset"
    reads_need_listing = True

    def __init__(self, spec: str, *, storage_options: Mapping[str, Any] | None = None,
                 max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        super().__init__(str(spec), max_pixels=max_pixels)
        self.storage_options = dict(storage_options or {})
        self._fs: Any = None
        self._shard_root = ""
        self._shards: list[str] = []
        self._index: pa.Table | None = None  # id, shard, offset, size: sorted by id
        self._image_exts = frozenset(e.lstrip(".") for e in pillow_extensions())

    def _shard_paths(self) -> tuple[Any, str, list[str]]:
        return list_shards(self.root, ".tar", self.storage_options)

    def _members(self, s: int) -> tuple[list[tuple[str, int, int]], str | None]:
        """(key, data offset, size) of each sample's image in shard s, and the error that ended the walk."""
        out: list[tuple[str, int, int]] = []
        seen: set[str] = set()
        error = None
        with self.fs.open(self._shards[s], "rb", block_size=1 << 16) as fh:
            try:
                with tarfile.open(fileobj=fh, mode="r:") as tf:
                    for m in tf:
                        if not m.isfile():
                            continue
                        key, ext = split_key(m.name)
                        if key in seen or ext.rpartition(".")[2] not in self._image_exts:
                            continue
                        seen.add(key)
                        out.append((key, m.offset_data, m.size))
            except (tarfile.TarError, EOFError, OSError) as exc:
                error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        return out, error

    def list_ids(self) -> pa.Array:
        self.fs
        ids, shard, offset, size = [], [], [], []
        for s in range(len(self._shards)):
            name = self.shard_name(s)
            try:
                members, error = self._members(s)
            except Exception as exc:  # noqa: BLE001 - a shard that cannot be opened: one error row
                members, error = [], f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            if error and not members:
                self._refused[name] = f"unreadable shard ({error})"
                log.warning("pool %s: %s: %s", self.root, name, self._refused[name])
                continue
            if error:  # e.g. a shard cut short: the members listed so far stay (a cut one reads as truncated)
                log.warning("pool %s: %s ends early (%s); %d samples listed", self.root, name, error, len(members))
            ids.extend(f"{name}#{k}" for k, _, _ in members)
            shard.extend([s] * len(members))
            offset.extend(o for _, o, _ in members)
            size.extend(n for _, _, n in members)
        index = pa.table({"id": pa.array(ids, pa.string()), "shard": pa.array(shard, pa.int32()),
                          "offset": pa.array(offset, pa.int64()), "size": pa.array(size, pa.int64())})
        self._index = index.take(pc.sort_indices(index.column("id")))
        return self._index.column("id").combine_chunks()

    def read(self, ids: Sequence[str]) -> Iterator[RawItem]:
        ids = list(ids)
        at = lookup(source_index(self), ids, ["offset", "size"])
        return read_by_shard(ids, at["shard"], lambda k, pos: self._read_run(
            k, [ids[i] for i in pos], at["offset"][pos], at["size"][pos]))

    def _read_run(self, s: int, ids: list[str], offset: np.ndarray, size: np.ndarray) -> Iterator[RawItem]:
        path = self._shards[s]
        lo, hi = int(offset.min()), int((offset + size).max())
        try:
            if hi - lo <= SPAN_SLACK * max(int(size.sum()), 1):  # close together: one request for the span
                span = self.fs.cat_file(path, start=lo, end=hi)
                chunks = [span[int(o) - lo:int(o + n) - lo] for o, n in zip(offset, size)]
            else:
                chunks = self.fs.cat_ranges([path] * len(ids), [int(o) for o in offset],
                                            [int(o + n) for o, n in zip(offset, size)])
        except Exception as exc:  # noqa: BLE001 - the shard went away since it was listed
            reason = "file not found" if isinstance(exc, FileNotFoundError) else \
                f"unreadable shard ({type(exc).__name__}: {' '.join(str(exc).split())})"
            for image_id in ids:
                yield RawItem(image_id, None, reason)
            return
        for image_id, n, data in zip(ids, size, chunks):
            if isinstance(data, BaseException):
                yield RawItem(image_id, None, f"cannot read ({type(data).__name__}: {data})")
            elif len(data) < int(n):
                yield RawItem(image_id, None, f"truncated tar member (got {len(data)} of {int(n)} bytes)")
            elif int(n) == 0:
                yield RawItem(image_id, None, "empty file (0 bytes)")
            else:
                yield RawItem(image_id, bytes(data))

    def describe(self) -> dict[str, Any]:
        return {"pool": self.root, "format": "webdataset", "storage_options": public_options(self.storage_options)}
