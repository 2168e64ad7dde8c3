"""`ParquetSource`: Parquet shards with an image column, local or in an object store (the layout of Hugging Face's
image datasets: `data/train-00000-of-00002.parquet`, column `image` = `{bytes, path}`).

Listing reads each shard's footer and, when there is one, only the image paths (the struct's `path`
field: no image bytes). Reading takes the row groups that hold the rows asked for, image column only.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from blindspots.data.sources.decode import DEFAULT_MAX_PIXELS
from blindspots.data.sources.patterns import list_shards
from blindspots.data.sources.tables import TableSource, path_column, paths_of

__all__ = ["ParquetSource"]

OPEN_FILES = 8


class ParquetSource(TableSource):
    """Parquet shards: a file, a glob ('s3://b/data/*.parquet'), a brace pattern, or a folder/prefix of them.

    image_column: the image column (default: 'image', or the only binary / {bytes, path} column).
    storage_options: fsspec options (e.g. {'endpoint_url': ...}); credentials from the store's environment.
    """

    kind = "parquet"

    def __init__(self, spec: str, *, image_column: str | None = None,
                 storage_options: Mapping[str, Any] | None = None, max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        super().__init__(str(spec), image_column=image_column, storage_options=storage_options,
                         max_pixels=max_pixels)

    def _shard_paths(self) -> tuple[Any, str, list[str]]:
        return list_shards(self.root, ".parquet", self.storage_options)

    def _file(self, s: int) -> pq.ParquetFile:
        """The open ParquetFile of shard s (the last OPEN_FILES are kept open, footers read once; dropped
        when pickled)."""
        files: dict[int, pq.ParquetFile] = self._fs_cache if isinstance(self._fs_cache, dict) else {}
        if s not in files:
            while len(files) >= OPEN_FILES:
                files.pop(next(iter(files)))
            files[s] = pq.ParquetFile(self.fs.open(self._shards[s], "rb"))
        self._fs_cache = files
        return files[s]

    def _schema(self, s: int) -> pa.Schema:
        return self._file(s).schema_arrow

    def _list_shard(self, s: int) -> tuple[int, pa.Array | None]:
        pf = self._file(s)
        where = path_column(pf.schema_arrow, self.image_column_of(s))
        if where is None:
            return pf.metadata.num_rows, None
        return pf.metadata.num_rows, paths_of(pf.read(columns=[where]), where)

    def _read_columns(self, s: int, columns: list[str], rows: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        pf = self._file(s)
        sizes = np.array([pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)], np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        group_of = np.searchsorted(starts, rows, side="right") - 1
        groups = np.unique(group_of)
        table = pf.read_row_groups([int(g) for g in groups], columns=columns)
        base = np.concatenate([[0], np.cumsum(sizes[groups])])  # where each read group starts in `table`
        slot = np.searchsorted(groups, group_of)
        return table, base[slot] + (rows - starts[group_of])
