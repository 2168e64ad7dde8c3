"""`ListSource`: the images named in a list file (txt, CSV/TSV, or a Parquet column) of paths or URIs.

Entries are read with Arrow (10^6 lines are one buffer) and become ids:
  - a URI ('s3://bucket/a/cat.jpg', 'https://...', 'file:///x.png') is its own id;
  - a relative path ('a/cat.jpg') is an id relative to `root` (default: the list file's folder), read
    from root + '/' + id, like a folder pool's ids; an entry with a '..' part is a ValueError;
  - an absolute local path is relative to a local `root` when under it, else the id 'file://<path>'.
The list file itself may be local or in an object store. Text lists skip blank lines and lines
starting with '#'; CSV/TSV and Parquet lists take `column` (default: the first of path, url, uri,
image, file, else the first string column). A missing object (a dead URI) is an error row.
"""
from __future__ import annotations

import io
import posixpath
from typing import Any, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from blindspots.data.sources.base import PoolSource, RawItem
from blindspots.data.sources.decode import DEFAULT_MAX_PIXELS
from blindspots.data.sources.fs import cat_many, get_fs, is_uri, join, public_options, storage_error, tool_url

# Lazy imports: pyarrow.parquet (`blindspots --help` and a folder pool start without it).

__all__ = ["ListSource", "LIST_SUFFIXES", "read_list_column"]

LIST_SUFFIXES = (".txt", ".lst", ".csv", ".tsv", ".parquet")
_COLUMN_NAMES = ("path", "url", "uri", "image", "file", "filename")
_URI = r"^[a-zA-Z][a-zA-Z0-9+.-]*://"


def _pick_column(table: pa.Table, column: str | None, where: str) -> pa.Array:
    if column is not None:
        if column not in table.column_names:
            raise ValueError(f"--list-column: expected a column of {where} ({table.column_names}), got {column!r}")
        name = column
    else:
        strings = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        named = [n for n in _COLUMN_NAMES if n in strings]
        if not strings:
            raise ValueError(f"list_file: expected a column of paths or URIs in {where}, got columns "
                             f"{table.schema.names} (none of strings)")
        name = named[0] if named else strings[0]
    return table.column(name).combine_chunks().cast(pa.string())


def read_list_column(data: bytes, suffix: str, column: str | None, where: str) -> pa.Array:
    """The entries of a list file's bytes as an Arrow string array (nulls and blanks dropped)."""
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        arr = _pick_column(pq.read_table(io.BytesIO(data)), column, where)
    elif suffix in (".csv", ".tsv"):
        table = pcsv.read_csv(io.BytesIO(data), parse_options=pcsv.ParseOptions(delimiter="\t" if suffix == ".tsv"
                                                                                  else ","),
                              convert_options=pcsv.ConvertOptions(strings_can_be_null=True))
        arr = _pick_column(table, column, where)
    else:
        if column is not None:
            raise ValueError(f"--list-column: expected a CSV, TSV or Parquet list, got the text list {where}")
        arr = pc.split_pattern(pa.array([data.decode("utf-8")]), "\n")[0].values
        arr = pc.utf8_trim_whitespace(arr)
        arr = arr.filter(pc.invert(pc.starts_with(arr, "#")))
    arr = pc.utf8_trim_whitespace(arr.drop_null())
    return arr.filter(pc.not_equal(pc.utf8_length(arr), 0))


class ListSource(PoolSource):
    """The images a list file names (module docstring).

    list_file: a local path or URI of a .txt/.lst, .csv/.tsv or .parquet list. root: where relative
    entries live (a folder or URI prefix; default: the list file's folder). column: for CSV/Parquet.
    storage_options: for the list file, the root and every URI entry (one set of options).
    """

    kind = "list"

    def __init__(self, list_file: str, *, root: str | None = None, column: str | None = None,
                 storage_options: Mapping[str, Any] | None = None, max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        self.list_file = str(list_file)
        self.storage_options = dict(storage_options or {})
        fs, path = get_fs(self.list_file, self.storage_options)
        base = posixpath.dirname(path) if is_uri(self.list_file) else None
        if root is None:
            root = (self.list_file.split("://", 1)[0] + "://" + base) if base is not None else \
                posixpath.dirname(path)
        super().__init__(str(root), max_pixels=max_pixels)
        self.column = column
        self._root_is_uri = is_uri(self.root)
        self._root_path = get_fs(self.root, self.storage_options)[1].rstrip("/")
        self._fs: dict[str, Any] | None = None

    def _filesystem(self, uri: str) -> tuple[Any, str]:
        """(fs, path) for a URI id or root-relative id, one filesystem per protocol (cached)."""
        if self._fs is None:
            self._fs = {}
        if is_uri(uri):
            protocol = uri.split("://", 1)[0]
            target = uri
        else:
            protocol = self.root.split("://", 1)[0] if self._root_is_uri else "file"
            target = join(self._root_path, uri) if not self._root_is_uri else join(self.root, uri)
        if protocol not in self._fs:
            self._fs[protocol] = get_fs(target, self.storage_options)[0]
        fs = self._fs[protocol]
        path = fs._strip_protocol(target) if is_uri(target) else target
        return fs, path

    def list_ids(self) -> pa.Array:
        fs, path = get_fs(self.list_file, self.storage_options)
        suffix = posixpath.splitext(path)[1].lower()
        try:
            data = fs.cat_file(path)
        except Exception as exc:  # noqa: BLE001 - a missing or unreadable list is one line
            raise storage_error("list_file", self.list_file, exc) from None
        arr = read_list_column(data, suffix, self.column, self.list_file)
        uri = pc.match_substring_regex(arr, _URI)
        absolute = pc.and_(pc.invert(uri), pc.starts_with(arr, "/"))
        if not self._root_is_uri:  # absolute paths under a local root become relative ids
            prefix = self._root_path.rstrip("/") + "/"
            under = pc.and_(absolute, pc.starts_with(arr, prefix))
            arr = pc.if_else(under, pc.utf8_slice_codeunits(arr, len(prefix)), arr)
            absolute = pc.and_(absolute, pc.invert(under))
        arr = pc.if_else(absolute, pc.binary_join_element_wise("file://", arr, ""), arr)
        relative = pc.invert(pc.or_(uri, absolute))
        arr = pc.if_else(relative, pc.replace_substring_regex(arr, r"^(\./)+", ""), arr)
        bad = pc.and_(relative, pc.match_substring_regex(arr, r"(^|/)\.\.(/|$)|\\"))
        if pc.any(bad).as_py():
            shown = arr.filter(bad).to_pylist()[:5]
            raise ValueError(f"list_file: expected paths inside the pool root {self.root!r} (no '..'), got "
                             f"{pc.sum(bad).as_py()} outside it, e.g. {shown}")
        return arr

    def read(self, ids: Sequence[str]) -> Iterator[RawItem]:
        ids = list(ids)
        s = 0
        while s < len(ids):  # runs of ids on one filesystem are read together
            fs, _ = self._filesystem(ids[s])
            e = s + 1
            while e < len(ids) and self._filesystem(ids[e])[0] is fs and e - s < 256:
                e += 1
            run = ids[s:e]
            for image_id, (data, error) in zip(run, cat_many(fs, [self._filesystem(i)[1] for i in run])):
                yield RawItem(image_id, data, error)
            s = e

    def url(self, image_id: str) -> str | None:
        if is_uri(image_id):
            return None if image_id.startswith("file://") else tool_url(image_id)
        return tool_url(join(self.root, image_id)) if self._root_is_uri and not self.root.startswith("file://") \
            else None

    def fingerprint(self) -> str | None:
        fs, path = get_fs(self.list_file, self.storage_options)
        try:
            info = fs.info(path)
        except Exception:  # noqa: BLE001 - no stamp: the list is read again
            return None
        stamp = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified")
        return f"{self.list_file}|{info.get('size')}|{stamp}|{self.root}|{self.column}"

    def describe(self) -> dict[str, Any]:
        return {"pool": self.root, "list_file": self.list_file, "format": "list", "list_column": self.column,
                "storage_options": public_options(self.storage_options)}
