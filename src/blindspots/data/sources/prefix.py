"""`PrefixSource`: every image object under an fsspec URI prefix (`s3://bucket/pool/`, `gs://`, `az://`, `file://`).

Ids are the object keys relative to the prefix ('a/cat.jpg'), as a folder pool's ids are relative to its
folder, so a pool copied from a disk to a bucket keeps its ids. Listing walks the prefix folder by
folder (`fs.walk`; objects whose names, or a folder on their way, start with '.' are skipped, as in a
folder pool, and hidden folders are never listed; only Pillow's image extensions are kept): each
folder's names become an Arrow array and the filesystem's listing cache of that folder is dropped at
once, so memory holds the ids and one folder's listing, not a dict per object of the whole prefix (a
recursive `find` keeps one for every object until it returns). Reads are whole objects, READ_CHUNK at
a time concurrently.
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from blindspots.data.sources.base import PoolSource, RawItem
from blindspots.data.sources.decode import DEFAULT_MAX_PIXELS, normalise_extensions
from blindspots.data.sources.fs import cat_many, get_fs, join, public_options, storage_error, tool_url

__all__ = ["PrefixSource"]


class PrefixSource(PoolSource):
    """The images under `uri` (a prefix / folder URI).

    uri: 's3://bucket/pool/' (trailing slash optional), 'gs://...', 'az://container/...', 'file:///data/pool'.
    storage_options: passed to the filesystem (e.g. {'endpoint_url': 'http://127.0.0.1:9000'} for an
        S3-compatible store); credentials come from the store's usual environment.
    extensions: as `ImagePool`'s (default: everything Pillow decodes).
    """

    kind = "prefix"

    def __init__(self, uri: str, *, storage_options: Mapping[str, Any] | None = None,
                 extensions: Iterable[str] | None = None, max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        super().__init__(uri.rstrip("/") + "/", max_pixels=max_pixels)
        self.storage_options = dict(storage_options or {})
        self._extensions_given = None if extensions is None else sorted(normalise_extensions(extensions))
        self.extensions = normalise_extensions(extensions)
        self._fs: Any = None
        self._base_path = get_fs(self.root, self.storage_options)[1].rstrip("/")

    @property
    def fs(self) -> Any:
        if self._fs is None:
            self._fs = get_fs(self.root, self.storage_options)[0]
        return self._fs

    def list_ids(self) -> pa.Array:
        base = self._base_path
        chunks: list[pa.Array] = []
        try:
            for folder, dirs, files in self.fs.walk(base, detail=False, on_error="raise"):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # in place: walk skips hidden folders
                rel = folder[len(base) + 1:] + "/" if folder.startswith(base + "/") else ""
                keep = [rel + f for f in files
                        if f and not f.startswith(".") and os.path.splitext(f)[1].lower() in self.extensions]
                if keep:
                    chunks.append(pa.array(keep, pa.string()))
                self.fs.invalidate_cache(folder)  # s3fs / gcsfs keep a dict per listed entry otherwise
            if not chunks:
                self.fs.ls(base)  # says why: no bucket, no credentials, ... (an empty prefix lists nothing)
        except Exception as exc:  # noqa: BLE001 - any store error is one line naming the pool
            raise storage_error("pool", self.root, exc) from None
        ids = pa.concat_arrays(chunks) if chunks else pa.array([], pa.string())
        return ids.take(pc.sort_indices(ids))  # the order a recursive find gives: sorted keys

    def read(self, ids: Sequence[str]) -> Iterator[RawItem]:
        ids = list(ids)
        for image_id, (data, error) in zip(ids, cat_many(self.fs, [join(self._base_path, i) for i in ids])):
            yield RawItem(image_id, data, error)

    def url(self, image_id: str) -> str | None:
        return tool_url(join(self.root, image_id)) if not self.root.startswith("file://") else None

    def describe(self) -> dict[str, Any]:
        return {"pool": self.root, "format": "images", "storage_options": public_options(self.storage_options),
                **({"extensions": self._extensions_given} if self._extensions_given else {})}
