"""`TableSource`: images stored in a column of table shards (Parquet files, Arrow files of `datasets`).

The image column is Hugging Face's `Image` struct `{bytes: binary, path: string}` or a plain binary
column. Ids: the image paths (the struct's `path`, else a top-level string column `path`) when
every row has one and they are unique relative paths; otherwise `<shard>#<row>` with the row
zero-padded to 6 digits ('train-00000-of-00002.parquet#000017'), so that sorted ids keep each
shard's rows together and in order. A row without bytes (null) or with bytes that are no image
is that row's error; a shard that cannot be opened is one error row whose id is the shard's name.

The index (id -> shard, row) is an Arrow table: 10^6 rows are a few arrays, not 10^6 objects.
Reads go shard by shard, one Parquet row group (or one Arrow file) at a time.
"""
from __future__ import annotations

import logging
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from blindspots.data.sources.base import PoolSource, RawItem
from blindspots.data.sources.decode import DEFAULT_MAX_PIXELS
from blindspots.data.sources.fs import public_options
from blindspots.data.sources.index import lookup, read_by_shard, source_index
from blindspots.data.sources.patterns import ShardFiles
from blindspots.ids import check_image_id

log = logging.getLogger(__name__)

__all__ = ["ImageColumnError", "TableSource", "find_image_column", "path_column", "paths_of", "row_ids"]

ROW_DIGITS = 6


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t) \
        if hasattr(pa.types, "is_binary_view") else pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _is_image_type(t: pa.DataType) -> bool:
    if _is_binary(t):
        return True
    return pa.types.is_struct(t) and any(t.field(i).name == "bytes" and _is_binary(t.field(i).type)
                                         for i in range(t.num_fields))


class ImageColumnError(ValueError):
    """The shards have no (or several) image columns: the whole pool is wrong, not one shard."""


def find_image_column(schema: pa.Schema, name: str | None, where: str, *, required: bool = True) -> str | None:
    """The image column: `name` if given (checked), else 'image' or the only image-like column."""
    candidates = [f.name for f in schema if _is_image_type(f.type)]
    if name is not None:
        if name not in schema.names or name not in candidates:
            raise ImageColumnError(f"--image-column: expected a binary or {{bytes, path}} column of {where} "
                             f"({candidates or 'none'}), got {name!r}")
        return name
    if "image" in candidates:
        return "image"
    if len(candidates) == 1:
        return candidates[0]
    if not required:
        return None
    if not candidates:
        raise ImageColumnError(f"pool: expected an image column (binary, or Hugging Face's {{bytes, path}}) in "
                               f"{where}, "
                         f"got columns {schema.names}")
    raise ImageColumnError(f"--image-column: expected one of {candidates} for {where} (several image columns), "
                           "got none")


def row_ids(shard_name: str, n_rows: int) -> pa.Array:
    """'<shard>#<row>' ids of a shard's rows, rows zero-padded to ROW_DIGITS (more when needed)."""
    width = max(ROW_DIGITS, len(str(max(n_rows - 1, 0))))
    rows = pa.array(np.char.zfill(np.arange(n_rows).astype(str), width) if n_rows else [], pa.string())
    return pc.binary_join_element_wise(shard_name + "#", rows, "")


def path_column(schema: pa.Schema, column: str) -> str | None:
    """Where the image paths are: '<column>.path' (Hugging Face's struct), a string column 'path', or None."""
    t = schema.field(column).type
    if pa.types.is_struct(t) and t.get_field_index("path") >= 0:
        return f"{column}.path"
    if "path" in schema.names and pa.types.is_string(schema.field("path").type):
        return "path"
    return None


def paths_of(table: pa.Table, where: str) -> pa.Array:
    """The paths column named by `path_column` out of a table read with it."""
    head, _, field = where.partition(".")
    col = table.column(head).combine_chunks()
    return col.field(field) if field else col


def _bytes(col: pa.Array) -> pa.Array:
    return col.field("bytes") if pa.types.is_struct(col.type) else col


class TableSource(ShardFiles, PoolSource):
    """Shared by `ParquetSource` and `HFDiskSource`: subclasses give the shard list and how to read a shard."""

    reads_need_listing = True

    def __init__(self, root: str, *, image_column: str | None, storage_options: Mapping[str, Any] | None,
                 max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        super().__init__(root, max_pixels=max_pixels)
        self.image_column = image_column
        self.storage_options = dict(storage_options or {})
        self._fs: Any = None
        self._shard_root = ""
        self._shards: list[str] = []  # paths inside the filesystem
        self._index: pa.Table | None = None  # id, shard (int32), row (int64): sorted by id
        self._fs_cache: Any = None  # per format: open files (Parquet), the last table (Arrow)

    # -- subclass hooks --

    def _shard_paths(self) -> tuple[Any, str, list[str]]:
        """(fs, root path, shard paths)."""
        raise NotImplementedError

    def _schema(self, s: int) -> pa.Schema:
        raise NotImplementedError

    def _read_columns(self, s: int, columns: list[str], rows: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        """(table of `columns` holding `rows`, the position of each of `rows` in it)."""
        raise NotImplementedError

    def _list_shard(self, s: int) -> tuple[int, pa.Array | None]:
        """(rows, their image paths or None) of shard s, reading as little as the format allows."""
        raise NotImplementedError

    def image_column_of(self, s: int) -> str:
        return find_image_column(self._schema(s), self.image_column, self.shard_name(s))

    # -- common --

    def list_ids(self) -> pa.Array:
        self.fs  # lists the shards
        ids, shard_col, row_col, names = [], [], [], []
        for s in range(len(self._shards)):
            name = self.shard_name(s)
            try:
                n, paths = self._list_shard(s)
            except ImageColumnError:
                raise
            except Exception as exc:  # noqa: BLE001 - an unreadable shard is one error row, named by the shard
                self._refused[name] = f"unreadable shard ({type(exc).__name__}: {' '.join(str(exc).split())})"
                log.warning("pool %s: %s: %s", self.root, name, self._refused[name])
                continue
            names.append((name, n, paths))
            shard_col.append(pa.array(np.full(n, s, np.int32)))
            row_col.append(pa.array(np.arange(n, dtype=np.int64)))
        use_paths = bool(names) and all(p is not None and p.null_count == 0 for _, _, p in names)
        if use_paths:
            every = pa.concat_arrays([p.cast(pa.string()) for _, _, p in names])
            use_paths = len(pc.unique(every)) == len(every) and _all_relative(every)
        for name, n, paths in names:
            ids.append(paths.cast(pa.string()) if use_paths else row_ids(name, n))
        if not ids:
            self._index = pa.table({"id": pa.array([], pa.string()), "shard": pa.array([], pa.int32()),
                                    "row": pa.array([], pa.int64())})
            return self._index.column("id").combine_chunks()
        index = pa.table({"id": pa.concat_arrays(ids), "shard": pa.concat_arrays(shard_col),
                          "row": pa.concat_arrays(row_col)})
        self._index = index.take(pc.sort_indices(index.column("id")))
        return self._index.column("id").combine_chunks()

    def read(self, ids: Sequence[str]) -> Iterator[RawItem]:
        ids = list(ids)
        at = lookup(source_index(self), ids, ["row"])
        return read_by_shard(ids, at["shard"], lambda k, pos: self._read_run(k, [ids[i] for i in pos], at["row"][pos]))

    def _read_run(self, k: int, ids: list[str], rows: np.ndarray) -> Iterator[RawItem]:
        """One read of the row groups that hold `rows` of shard k, image column only."""
        try:
            column = self.image_column_of(k)
            table, pos = self._read_columns(k, [column], rows)
            values = _bytes(table.column(column).combine_chunks())
        except Exception as exc:  # noqa: BLE001 - the shard went bad since it was listed
            reason = f"unreadable shard ({type(exc).__name__}: {' '.join(str(exc).split())})"
            for image_id in ids:
                yield RawItem(image_id, None, reason)
            return
        for image_id, p in zip(ids, pos):
            data = values[int(p)].as_py()
            if data is None:
                yield RawItem(image_id, None, "no image bytes in this row (null)")
            elif len(data) == 0:
                yield RawItem(image_id, None, "empty file (0 bytes)")
            else:
                yield RawItem(image_id, data)

    def describe(self) -> dict[str, Any]:
        return {"pool": self.root, "format": self.kind, "image_column": self.image_column,
                "storage_options": public_options(self.storage_options)}


def _all_relative(paths: pa.Array) -> bool:
    bad = pc.or_(pc.starts_with(paths, "/"), pc.match_substring_regex(paths, r"(^|/)\.\.(/|$)|^[a-zA-Z]+:|\\|#"))
    if pc.any(bad).as_py():
        return False
    try:  # the few remaining rules (no blank, no surrounding spaces) on a sample
        for p in paths.slice(0, 100).to_pylist():
            check_image_id(p)
    except ValueError:
        return False
    return True
