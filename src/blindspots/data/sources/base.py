"""`PoolSource`: the one interface every pool source implements (folder, list, prefix, Parquet, tar, ...).

A source knows two things: its ids (`list_ids`, sorted unique strings, listed once and kept as an
Arrow array: 10^6 ids are one buffer, not 10^6 Python objects) and how to read the bytes of some
of them (`read`, in the order asked, batched however suits the storage: one Parquet row group,
one tar stream, concurrent object reads). Everything else is done here, the same for all:
decoding (`decode.decode_image`), content hashes (blake2b-128 of the bytes decoded, so one photo
has one hash in every source), per-item error rows, `.errors` bookkeeping, progress bars.

Sources are picklable and hold no open handles between calls (`__getstate__` drops the cached
filesystem), so a source built on a driver can be shipped to Ray tasks or worker processes and
read there; what it reads from must then be reachable from the worker (an object store, or the
same path). `describe()` gives a JSON dict from which `sources.open_pool` rebuilds an equal
source (a project remembers its pool this way); credentials are never part of it.
"""
from __future__ import annotations

import bisect
import hashlib
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm

from blindspots.data.sources.decode import DEFAULT_MAX_PIXELS, ImageDecodeError, check_max_pixels, decode_image

log = logging.getLogger(__name__)

__all__ = ["PoolItem", "PoolSource", "RawItem", "content_hash_of", "positions_in", "sorted_unique"]

HASH_LOOKUP_FROM = 4096  # asking this many ids at once: one Arrow hash lookup; fewer: binary searches


@dataclass
class PoolItem:
    """One pool entry as read: `image` uint8 [H, W, 3], or None with `error` set to the reason."""

    id: str
    image: np.ndarray | None
    error: str | None
    content_hash: str | None = None  # set by `iter_hashed_items` (hex blake2b of the bytes decoded)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class RawItem:
    """One entry's bytes as stored (`data`), or None with `error` (missing object, truncated member, ...)."""

    id: str
    data: bytes | None
    error: str | None = None


def content_hash_of(data: bytes) -> str:
    """Hex blake2b (128-bit) of an image's bytes: equal for exact duplicates, in every source."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def sorted_unique(ids: pa.Array | Sequence[str]) -> pa.Array:
    """Ids as a sorted (byte order = code point order), duplicate-free Arrow string array."""
    arr = ids if isinstance(ids, (pa.Array, pa.ChunkedArray)) else pa.array(list(ids), pa.string())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    arr = pc.unique(arr.cast(pa.string()))
    return arr.take(pc.sort_indices(arr))


def positions_in(sorted_ids: pa.Array, ids: Sequence[str]) -> np.ndarray:
    """Position of each of `ids` in the sorted, unique `sorted_ids` (int64 [len(ids)], -1 where absent).

    A few ids (a scan shard's) are found by binary search, without hashing the whole pool's ids on every
    call; many at once by one Arrow hash lookup."""
    if len(ids) >= HASH_LOOKUP_FROM:
        pos = pc.index_in(pa.array(list(ids), pa.string()), value_set=sorted_ids)
        return pos.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    view = _SortedView(sorted_ids)
    out = np.full(len(ids), -1, np.int64)
    for k, image_id in enumerate(ids):
        i = bisect.bisect_left(view, image_id)
        if i < len(view) and view[i] == image_id:
            out[k] = i
    return out


class PoolSource:
    """Base of every pool source. Subclasses implement `list_ids`, `read` and `describe`.

    Public face (the same for every source; `data.sources.folder.ImagePool` is the folder source):
      ids / id_array   sorted ids (list of str, built on first use / pa.StringArray)
      refused          id -> reason for entries found but never read (error rows in a scan)
      errors           id -> reason for entries that failed when read (filled as they are read)
      iter_items(ids), iter_hashed_items(ids), load(id), load_hashed(id), read_bytes(id), content_hash(id)
      url(id)          where a person's tool can fetch the item (an object URL), or None
      root             the source as given (a folder, a URI, a list file): shown to people, kept in manifests
      describe()       JSON dict for `open_pool(**...)`; fingerprint(): cheap content stamp or None
    """

    kind = "base"
    reads_need_listing = False  # shard sources find an item through their index: listed before any read

    def __init__(self, root: str, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        self.root = root
        self.max_pixels = check_max_pixels(max_pixels)
        self.errors: dict[str, str] = {}
        self._refused: dict[str, str] = {}
        self._id_array: pa.Array | None = None
        self._ids: list[str] | None = None

    # -- what a subclass provides --

    def list_ids(self) -> pa.Array | Sequence[str]:
        """Every id of the source (any order; sorted and de-duplicated by the caller). May fill `.refused`."""
        raise NotImplementedError

    def read(self, ids: Sequence[str]) -> Iterator[RawItem]:
        """The bytes of `ids`, one RawItem each, in the order given. Never raises for one bad item."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """JSON-able keyword arguments of `sources.open_pool` that rebuild this source (no credentials)."""
        raise NotImplementedError

    def fingerprint(self) -> str | None:
        """A cheap stamp of the listing (e.g. sizes and etags of the shard files), or None when only a full
        listing tells (then a resumed scan lists again to check the pool did not change)."""
        return None

    def url(self, image_id: str) -> str | None:
        """A URL a labelling tool can fetch the item from (an object's s3://, gs://, ... URL), or None."""
        return None

    def urls(self, ids: Iterable[str]) -> dict[str, str] | None:
        """id -> `url(id)` when every id has one (an object-store pool), else None (e.g. items inside shards)."""
        out = {i: self.url(i) for i in ids}
        return None if any(u is None for u in out.values()) else out  # type: ignore[misc]

    # -- the listing --

    @property
    def refused(self) -> dict[str, str]:
        """id -> reason for entries found but not readable as items (e.g. an unreadable shard); lists first."""
        if self._id_array is None and not getattr(self, "_listing", False):
            self.id_array
        return self.__dict__.setdefault("_refused", {})

    @refused.setter
    def refused(self, value: dict[str, str]) -> None:
        self._refused = value

    @property
    def id_array(self) -> pa.Array:
        """Sorted unique ids, pa.string() [N] (listed on first use, then kept)."""
        if self._id_array is None:
            self._listing = True
            try:
                self._id_array = sorted_unique(self.list_ids())
            finally:
                self._listing = False
            log.info("pool %s: %d images", self.root, len(self._id_array))
        return self._id_array

    @property
    def ids(self) -> list[str]:
        """Sorted ids as Python strings (built from `id_array` on first use; large pools: use `id_array`)."""
        if self._ids is None:
            self._ids = self.id_array.to_pylist()
        return self._ids

    def __len__(self) -> int:
        return len(self.id_array)

    def __contains__(self, image_id: object) -> bool:
        if not isinstance(image_id, str):
            return False
        return bool(positions_in(self.id_array, [image_id])[0] >= 0)

    def __repr__(self) -> str:
        n = len(self._id_array) if self._id_array is not None else "unlisted"
        return f"{type(self).__name__}(root={self.root!r}, images={n}, errors={len(self.errors)})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_ids"] = None  # rebuilt from the Arrow array where needed: Arrow pickles as buffers
        for key in [k for k in state if k.startswith("_fs")]:
            state[key] = None  # filesystems are opened again where the source is unpickled
        return state

    def check_ids(self, ids: Sequence[str]) -> None:
        """ValueError unless every id is in the pool or in `.refused` (checked in Arrow, no Python set)."""
        if not ids or self._id_array is None:
            return  # not listed (e.g. a resumed scan's ids came from its folder): each read says what is missing
        ids = list(ids)
        found = positions_in(self.id_array, ids) >= 0
        if not found.all():
            unknown = [i for i, ok in zip(ids, found) if not ok and i not in self._refused]
            if unknown:
                raise ValueError(f"ids: expected ids of this pool, got {len(unknown)} unknown, e.g. {unknown[:5]}")

    # -- reading --

    def read_bytes(self, image_id: str) -> bytes:
        """The stored bytes of one item; ImageDecodeError (with `.reason`) when they cannot be read."""
        self.check_ids([image_id])
        if image_id in self._refused:
            raise ImageDecodeError(self._refused[image_id], image_id)
        raw = next(iter(self.read([image_id])))
        if raw.data is None:
            raise ImageDecodeError(str(raw.error), image_id)
        return raw.data

    def content_hash(self, image_id: str) -> str:
        """Hex blake2b (128-bit) digest of the item's bytes: equal for exact duplicates."""
        try:
            return content_hash_of(self.read_bytes(image_id))
        except ImageDecodeError as exc:
            raise ValueError(str(exc)) from None

    def load_hashed(self, image_id: str) -> tuple[np.ndarray, str | None]:
        """(uint8 [H, W, 3] RGB, content hash) from one read; ImageDecodeError (recorded in `.errors`)."""
        try:
            data = self.read_bytes(image_id)
            image = decode_image(data, max_pixels=self.max_pixels)
        except ImageDecodeError as exc:
            self.errors[image_id] = exc.reason
            raise ImageDecodeError(exc.reason, image_id) from None
        self.errors.pop(image_id, None)
        return image, content_hash_of(data)

    def load(self, image_id: str) -> np.ndarray:
        """uint8 [H, W, 3] RGB of one image; raises ImageDecodeError (recorded in `.errors`)."""
        return self.load_hashed(image_id)[0]

    def iter_items(self, ids: Iterable[str] | None = None, *, progress: bool = False) -> Iterator[PoolItem]:
        """Yield a PoolItem per id (all ids by default, in order); never raises for a bad item.

        ids: a subset to read (e.g. the ids a resumed scan has not done yet); each must be in the
        pool or in `.refused` (ValueError otherwise, before anything is read); a refused id yields
        an item with its reason as the error. progress: show a tqdm bar.
        """
        return self._items(ids, progress, hashed=False)

    def iter_hashed_items(self, ids: Iterable[str] | None = None, *, progress: bool = False) -> Iterator[PoolItem]:
        """`iter_items`, each good item with its `content_hash` from the same read (what a scan reads)."""
        return self._items(ids, progress, hashed=True)

    def __iter__(self) -> Iterator[PoolItem]:
        return self.iter_items()

    def _items(self, ids: Iterable[str] | None, progress: bool, hashed: bool) -> Iterator[PoolItem]:
        todo = self.ids if ids is None else [str(i) for i in ids]
        if ids is not None:
            self.check_ids(todo)
        if self.reads_need_listing:
            self.id_array
        refused = self._refused
        readable = [i for i in todo if i not in refused]
        raws = self.read(readable)
        bar = tqdm(total=len(todo), desc="reading pool", unit="img", disable=not progress)
        try:
            for image_id in todo:
                if image_id in refused:
                    log.warning("skipping %s: %s", image_id, refused[image_id])
                    yield PoolItem(image_id, None, refused[image_id])
                else:
                    yield self._decode(next(raws), hashed)
                bar.update(1)
        finally:
            bar.close()
            raws.close() if hasattr(raws, "close") else None

    def _decode(self, raw: RawItem, hashed: bool) -> PoolItem:
        if raw.data is None:
            reason = str(raw.error)
        else:
            try:
                image = decode_image(raw.data, max_pixels=self.max_pixels)
            except ImageDecodeError as exc:
                reason = exc.reason
            else:
                self.errors.pop(raw.id, None)
                return PoolItem(raw.id, image, None, content_hash_of(raw.data) if hashed else None)
        self.errors[raw.id] = reason
        log.warning("skipping %s: %s", raw.id, reason)
        return PoolItem(raw.id, None, reason)


class _SortedView:
    """A sorted Arrow string array seen as a sequence of str for `bisect` (one id per probe)."""

    def __init__(self, arr: pa.Array) -> None:
        self.arr = arr

    def __len__(self) -> int:
        return len(self.arr)

    def __getitem__(self, i: int) -> str:
        return self.arr[i].as_py()
