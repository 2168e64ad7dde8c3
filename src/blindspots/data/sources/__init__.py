"""Pool sources: where the unlabeled images live, behind one interface (`PoolSource`).

`open_pool(pool, ...)` picks the source from what it is given:

| given | source | ids |
|---|---|---|
| a local folder | `ImagePool` (`folder.py`) | paths relative to the folder |
| a folder + `list_file` (local text list) | `ImagePool` | the listed relative paths |
| a list file (.txt/.lst/.csv/.tsv, or a Parquet file without an image column) of paths or URIs | `ListSource` | URIs as given; relative paths |
| a URI prefix `s3://bucket/pool/`, `gs://`, `az://`, `file://` | `PrefixSource` | keys relative to the prefix |
| Parquet shards with an image column (a file, a glob, a brace pattern, or a folder/prefix of them) | `ParquetSource` | the image path column, else `<shard>#<row>` |
| WebDataset tar shards (`shard-{000000..000099}.tar`, a glob, a folder/prefix of them) | `TarSource` | `<shard>#<key>` |
| a Hugging Face `datasets` `save_to_disk` folder with an `Image` feature | `HFDiskSource` | the image path, else `<file>#<row>` |
| `fiftyone://DATASET` or `fiftyone://DATASET?view=SAVED_VIEW` (FiftyOne, `pip install 'blindspots[fiftyone]'`; shipped in `PLUGIN_FORMATS`, opened as a format added with `register_format` is) | `FiftyOneSource` | its filepaths (`file:///data/a.jpg`) |

`format=` forces one ('folder', 'images', 'list', 'parquet', 'webdataset', 'hf'). Storage options
(`endpoint_url` for an S3-compatible store, `anon`, ...) go to fsspec; credentials come from each
store's usual environment. Every source is picklable (read it in Ray tasks or worker processes)
and `open_pool(**source.describe())` rebuilds it.
"""
from __future__ import annotations

import os
import posixpath
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from blindspots.data.sources.base import PoolItem, PoolSource, RawItem, content_hash_of
from blindspots.data.sources.decode import DEFAULT_MAX_PIXELS, ImageDecodeError, decode_image, pillow_extensions
from blindspots.data.sources.fiftyone import open_fiftyone
from blindspots.data.sources.folder import ImagePool
from blindspots.data.sources.fs import get_fs, is_uri, parse_storage_option, split_uri_options
from blindspots.data.sources.hf import HFDiskSource
from blindspots.data.sources.labelled import SourceSegmentationSet
from blindspots.data.sources.listfile import LIST_SUFFIXES, ListSource
from blindspots.data.sources.prefix import PrefixSource
from blindspots.data.sources.tables import find_image_column
from blindspots.data.sources.webdataset import TarSource

# Lazy imports: pyarrow.parquet, also through blindspots.data.sources.parquet (`blindspots --help` and a folder pool
# start without it).

__all__ = ["FORMATS", "PLUGIN_FORMATS", "factory_formats", "ImageDecodeError", "ImagePool", "ListSource", "PoolItem", "PoolSource", "PrefixSource", "RawItem",
           "SourceSegmentationSet", "content_hash_of", "decode_image", "load_or_reason", "open_pool", "parse_storage_option", "register_format"]

FORMATS = ("folder", "images", "list", "parquet", "webdataset", "hf")
#: Formats that ship with blindspots but open through a factory, as a registered one would (a FiftyOne
#: dataset): format -> (factory, URI scheme or None). Read-only, so importing this module changes nothing.
PLUGIN_FORMATS: Mapping[str, tuple[Callable[..., PoolSource], str | None]] = MappingProxyType(
    {"fiftyone": (open_fiftyone, "fiftyone")})
#: Kinds of source a program adds with `register_format`: format -> (factory, URI scheme or None). Empty
#: until such a call.
EXTRA_FORMATS: dict[str, tuple[Callable[..., PoolSource], str | None]] = {}


def factory_formats() -> dict[str, tuple[Callable[..., PoolSource], str | None]]:
    """Every format opened through a factory: the shipped `PLUGIN_FORMATS`, then the registered ones."""
    return {**PLUGIN_FORMATS, **EXTRA_FORMATS}


def register_format(name: str, factory: Callable[..., PoolSource], *, scheme: str | None = None) -> None:
    """Add a kind of pool source: `open_pool(pool, format=name, **options)` calls `factory(pool, max_pixels=...,
    **options)`; with `scheme`, a pool written `<scheme>://...` picks it without `format`. The source's
    `describe()` must return {"pool": ..., "format": name, **options} so that `open_pool(**describe())`
    rebuilds it (a project keeps it that way)."""
    taken = FORMATS + tuple(PLUGIN_FORMATS)
    if not isinstance(name, str) or not name or name in taken:
        raise ValueError(f"name: expected a new format name (not one of {taken}), got {name!r}")
    EXTRA_FORMATS[name] = (factory, scheme)
_SHARD_SUFFIX = {".parquet": "parquet", ".tar": "webdataset", ".arrow": "hf"}


def _has_pattern(path: str) -> bool:
    return any(c in path for c in "*?[{")


def _sniff_folder(fs: Any, path: str) -> str | None:
    """'hf' for a save_to_disk folder, a shard format when the folder holds shards and no images, else None."""
    names = {posixpath.basename(p) for p in fs.ls(path, detail=False)}
    if "dataset_info.json" in names and "state.json" in names:
        return "hf"
    if "dataset_dict.json" in names:
        raise ValueError(f"pool: expected one split of a Hugging Face DatasetDict, got the dict folder {path!r} "
                         f"(give {path.rstrip('/')}/<split>, e.g. /train)")
    return None


def _shard_format_of(fs: Any, path: str) -> str | None:
    """The shard format of a folder with no images but .parquet or .tar files, else None."""
    images, exts = pillow_extensions(), set()
    for folder, _, files in fs.walk(path, detail=False):  # folder by folder: the first image ends it
        found = {os.path.splitext(f)[1].lower() for f in files}
        fs.invalidate_cache(folder)
        if found & images:
            return None
        exts |= found
    for suffix in (".parquet", ".tar"):
        if suffix in exts:
            return _SHARD_SUFFIX[suffix]
    return None


def open_pool(pool: str | os.PathLike, *, list_file: str | os.PathLike | None = None, list_column: str | None = None,
              format: str | None = None, image_column: str | None = None,
              storage_options: Mapping[str, Any] | None = None, extensions: Iterable[str] | None = None,
              max_pixels: int = DEFAULT_MAX_PIXELS, **options: Any) -> PoolSource:
    """The pool source for `pool` (see the module docstring). ValueError naming the argument otherwise.

    pool: a local folder or file, a glob / brace pattern, or a URI (`?key=value` after it: storage options).
    list_file: a list of the pool's images (relative to `pool`, or URIs). list_column: its column (CSV/Parquet).
    format: one of FORMATS to skip the guess. image_column: the Parquet / Arrow image column (default: the
    one image-like column). storage_options: fsspec options for every URI read. extensions: image
    extensions kept when listing a folder or prefix. max_pixels: the per-image pixel limit.
    options: for a format added by `register_format` (refused by the built-in ones).
    """
    scheme = str(pool).split("://", 1)[0] if "://" in str(pool) else None
    factories = factory_formats()
    by_scheme = [n for n, (_, s) in factories.items() if s is not None and s == scheme]
    if format in factories or (format is None and by_scheme):
        factory = factories[format or by_scheme[0]][0]
        return factory(str(pool), max_pixels=max_pixels, **options)
    if options:
        raise ValueError(f"options: expected none for the {format or 'guessed'} format, got {sorted(options)}")
    if format is not None and format not in FORMATS:
        raise ValueError(f"format: expected one of {FORMATS + tuple(factories)}, got {format!r}")
    spec, opts = split_uri_options(str(pool))
    opts.update(storage_options or {})
    common = {"max_pixels": max_pixels}
    if list_file is not None:
        lf, lopts = split_uri_options(str(list_file))
        opts = {**lopts, **opts}
        root = spec
        if not is_uri(root) and not is_uri(lf) and Path(root).is_dir() \
                and Path(lf).suffix.lower() in ("", ".txt", ".lst") and format in (None, "folder"):
            return ImagePool(root, list_file=lf, extensions=extensions, **common)  # paths under a local folder
        return ListSource(lf, root=root, column=list_column, storage_options=opts, **common)
    guessed = format is None
    if guessed:
        format = _guess(spec, opts)
    if format in ("folder", "images"):
        if format == "folder" and not is_uri(spec):
            images: PoolSource = ImagePool(spec, extensions=extensions, **common)
        else:
            images = PrefixSource(spec if is_uri(spec) else "file://" + os.path.abspath(spec), storage_options=opts,
                                  extensions=extensions, **common)
        if not guessed or len(images) > 0:
            return images
        format = _shard_format_of(*get_fs(spec, opts)) or format  # no images: shards, if it holds some
        if format in ("folder", "images"):
            return images
    spec = spec if is_uri(spec) else os.path.abspath(spec)  # what describe() keeps: valid from any folder
    if format == "list":
        return ListSource(spec, column=list_column, storage_options=opts, **common)
    if format == "parquet":
        from blindspots.data.sources.parquet import ParquetSource

        return ParquetSource(spec, image_column=image_column, storage_options=opts, **common)
    if format == "webdataset":
        return TarSource(spec, storage_options=opts, **common)

    return HFDiskSource(spec, image_column=image_column, storage_options=opts, **common)


def _guess(spec: str, opts: Mapping[str, Any]) -> str:
    """The format of `spec` from its name, or from what its folder holds."""
    name = spec.rstrip("/")
    suffix = os.path.splitext(name)[1].lower()
    if _has_pattern(name):
        if suffix in (".parquet", ".tar"):
            return _SHARD_SUFFIX[suffix]
        raise ValueError(f"pool: expected a pattern of .parquet or .tar shards, got {spec!r}")
    if suffix in LIST_SUFFIXES and suffix != ".parquet":
        return "list"
    fs, path = get_fs(spec, opts)
    if not is_uri(spec):
        if not os.path.exists(path):
            raise ValueError(f"pool: expected an existing folder, list file, shard or URI, got {spec!r}")
        if os.path.isfile(path):
            if suffix == ".parquet":
                return "parquet" if _has_image_column(spec, opts) else "list"
            if suffix == ".tar":
                return "webdataset"
            raise ValueError(f"pool: expected a folder, a list file ({', '.join(LIST_SUFFIXES)}), a .parquet or "
                             f".tar shard, got the file {spec!r}")
        return _sniff_folder(fs, path) or "folder"
    if suffix == ".parquet":
        return "parquet" if _has_image_column(spec, opts) else "list"
    if suffix == ".tar":
        return "webdataset"
    try:
        return _sniff_folder(fs, path) or "images"
    except ValueError:
        raise
    except Exception:  # noqa: BLE001 - listing errors are reported (one line) by the prefix source itself
        return "images"


def _has_image_column(spec: str, opts: Mapping[str, Any]) -> bool:
    import pyarrow.parquet as pq

    fs, path = get_fs(spec, opts)
    try:
        with fs.open(path, "rb") as fh:
            schema = pq.read_schema(fh)
    except Exception:  # noqa: BLE001 - the Parquet source reports it
        return True
    return find_image_column(schema, None, spec, required=False) is not None


def load_or_reason(pool: PoolSource | str | os.PathLike, image_id: str) -> tuple[Any, str]:
    """(uint8 [H, W, 3], "") of one pool image, or (None, why not): from a pool source, or from a folder
    (`pool / image_id`, refused when it resolves outside the folder). For pages that show images."""
    if isinstance(pool, PoolSource):
        try:
            return pool.load(image_id), ""
        except ImageDecodeError as exc:
            return None, exc.reason
        except (OSError, ValueError) as exc:
            return None, str(exc)
    root = Path(pool)
    path = root / image_id
    try:
        if not path.resolve().is_relative_to(root.resolve()):
            return None, "outside the pool"
        return decode_image(path), ""
    except ImageDecodeError as exc:
        return None, exc.reason
    except OSError as exc:
        return None, str(exc)

