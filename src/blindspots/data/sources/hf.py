"""`HFDiskSource`: a Hugging Face `datasets` folder written by `Dataset.save_to_disk`, read with pyarrow alone.

The folder holds `state.json` (its Arrow files, in order), `dataset_info.json` (the features: the image
column is the one whose `_type` is `Image`) and `data-XXXXX-of-YYYYY.arrow` files in Arrow's streaming
IPC format. Local files are memory-mapped (no copy); files in an object store are read whole, one at a
time. Ids as for Parquet shards: the images' paths, else `<file>#<row>`.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from blindspots.data.sources.decode import DEFAULT_MAX_PIXELS
from blindspots.data.sources.fs import get_fs, is_uri, join, storage_error
from blindspots.data.sources.tables import TableSource, path_column, paths_of

__all__ = ["HFDiskSource"]


class HFDiskSource(TableSource):
    """A `save_to_disk` folder (local or a URI prefix). image_column: default the `Image` feature."""

    kind = "hf"

    def __init__(self, folder: str, *, image_column: str | None = None,
                 storage_options: Mapping[str, Any] | None = None, max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        super().__init__(str(folder).rstrip("/"), image_column=image_column, storage_options=storage_options,
                         max_pixels=max_pixels)
        self._fs_table: tuple[int, pa.Table] | None = None

    def _shard_paths(self) -> tuple[Any, str, list[str]]:
        fs, path = get_fs(self.root, self.storage_options)
        path = path.rstrip("/")
        try:
            state = json.loads(fs.cat_file(join(path, "state.json")))
            info = json.loads(fs.cat_file(join(path, "dataset_info.json")))
        except Exception as exc:  # noqa: BLE001 - one line naming the folder
            raise storage_error("pool", self.root, exc) from None
        files = [f["filename"] for f in state.get("_data_files", [])]
        if not files:
            raise ValueError(f"pool: expected Arrow files listed in {self.root}/state.json, got none")
        images = [name for name, f in (info.get("features") or {}).items()
                  if isinstance(f, dict) and f.get("_type") == "Image"]
        if self.image_column is None and len(images) == 1:
            self.image_column = images[0]
        elif self.image_column is None and len(images) > 1:
            raise ValueError(f"--image-column: expected one of the Image features {images} of {self.root}, got none")
        return fs, path, [join(path, f) for f in files]

    def _table(self, s: int) -> pa.Table:
        """Shard s as an Arrow table (memory-mapped when local; the last one is kept)."""
        if self._fs_table is None or self._fs_table[0] != s:
            self._fs_table = None
            if not is_uri(self.root):
                source = pa.memory_map(self._shards[s], "r")
            else:
                source = pa.BufferReader(self.fs.cat_file(self._shards[s]))
            self._fs_table = (s, pa.ipc.open_stream(source).read_all())
        return self._fs_table[1]

    def _schema(self, s: int) -> pa.Schema:
        return self._table(s).schema

    def _list_shard(self, s: int) -> tuple[int, pa.Array | None]:
        table = self._table(s)
        where = path_column(table.schema, self.image_column_of(s))
        return table.num_rows, None if where is None else paths_of(table, where)

    def _read_columns(self, s: int, columns: list[str], rows: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        return self._table(s).select(columns), np.asarray(rows)
