"""`FiftyOneSource`: the images of a FiftyOne dataset, or of one of its saved views, as a pool.

The pool is named `fiftyone://DATASET` or `fiftyone://DATASET?view=SAVED_VIEW` (names URL-quoted
when they hold '/', '?' or '&'). Ids stay FiftyOne's filepaths: a local path `/data/a.jpg` becomes
the id `file:///data/a.jpg` (ids are relative paths or URIs, as a list file's absolute paths
become), a cloud filepath (`s3://...`) is its own id; so every scan row names its FiftyOne sample.
FiftyOne is imported only to list the ids (once per scan); the images are read from their files
like any list source's, so a scan on Ray needs no FiftyOne on the workers.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence
from urllib.parse import quote, unquote

from blindspots.data.sources.base import PoolSource, RawItem
from blindspots.data.sources.decode import DEFAULT_MAX_PIXELS
from blindspots.data.sources.fs import cat_many, get_fs, is_uri
from blindspots.extras import require

# Lazy imports: fiftyone (optional: only the call that uses it needs it).

__all__ = ["FiftyOneSource", "SCHEME", "filepath_of", "open_fiftyone"]

SCHEME = "fiftyone://"


def filepath_of(image_id: str) -> str:
    """The FiftyOne filepath of an id of this source ('file:///data/a.jpg' -> '/data/a.jpg')."""
    return image_id[len("file://"):] if image_id.startswith("file://") else image_id


def open_fiftyone(pool: str, *, max_pixels: int = DEFAULT_MAX_PIXELS, view: str | None = None) -> "FiftyOneSource":
    """`open_pool`'s factory for format "fiftyone" (`PLUGIN_FORMATS`): `fiftyone://NAME[?view=V]`, or a bare
    dataset name with format="fiftyone"; `view` names a saved view too."""
    uri = pool if pool.startswith(SCHEME) else SCHEME + quote(pool, safe="")
    return FiftyOneSource.from_uri(uri, {} if view is None else {"view": view}, max_pixels=max_pixels)


class FiftyOneSource(PoolSource):
    """The samples of FiftyOne dataset `dataset` (or of its saved view `view`) as a pool (module docstring)."""

    kind = "fiftyone"

    def __init__(self, dataset: str, *, view: str | None = None, max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        if not isinstance(dataset, str) or not dataset.strip():
            raise ValueError(f"pool: expected a FiftyOne dataset name after {SCHEME}, got {dataset!r}")
        root = SCHEME + quote(dataset, safe="") + (f"?view={quote(view, safe='')}" if view else "")
        super().__init__(root, max_pixels=max_pixels)
        self.dataset, self.view = dataset, view or None

    @classmethod
    def from_uri(cls, uri: str, options: Mapping[str, Any] | None = None, *,
                 max_pixels: int = DEFAULT_MAX_PIXELS) -> "FiftyOneSource":
        """`fiftyone://NAME` with `?view=SAVED_VIEW` (in `uri` or in `options`)."""
        opts = dict(options or {})
        base, _, query = uri.partition("?")
        for part in filter(None, query.split("&")):
            key, _, value = part.partition("=")
            opts[unquote(key)] = unquote(value)
        view = opts.pop("view", None)
        if opts:
            raise ValueError(f"pool: expected only ?view=SAVED_VIEW after a {SCHEME} pool, got options {sorted(opts)}")
        return cls(unquote(base[len(SCHEME):]) if base.startswith(SCHEME) else base,
                   view=None if view is None else str(view), max_pixels=max_pixels)

    def _collection(self) -> Any:
        fo = require("fiftyone", f"the pool {self.root!r}")
        if not fo.dataset_exists(self.dataset):
            names = fo.list_datasets()
            raise ValueError(f"pool: expected a FiftyOne dataset, got {self.dataset!r} (datasets here: "
                             f"{names[:10]}{' ...' if len(names) > 10 else ''})")
        ds = fo.load_dataset(self.dataset)
        if self.view is None:
            return ds
        if not ds.has_saved_view(self.view):
            raise ValueError(f"pool: expected a saved view of dataset {self.dataset!r}, got {self.view!r} "
                             f"(saved views: {ds.list_saved_views()})")
        return ds.load_saved_view(self.view)

    def list_ids(self) -> list[str]:
        coll = self._collection()
        if coll.media_type != "image":
            raise ValueError(f"pool: expected a FiftyOne collection of images, got media type {coll.media_type!r} "
                             f"in {self.root!r}")
        return ["file://" + p if not is_uri(p) else p for p in coll.values("filepath")]

    def read(self, ids: Sequence[str]) -> Iterator[RawItem]:
        ids = list(ids)
        s = 0
        while s < len(ids):  # runs of ids on one filesystem (local files, one bucket's store) read together
            scheme = ids[s].split("://", 1)[0]
            e = s + 1
            while e < len(ids) and ids[e].split("://", 1)[0] == scheme and e - s < 256:
                e += 1
            run = ids[s:e]
            fs = get_fs(run[0])[0]
            paths = [filepath_of(i) if i.startswith("file://") else fs._strip_protocol(i) for i in run]
            for image_id, (data, error) in zip(run, cat_many(fs, paths)):
                yield RawItem(image_id, data, error)
            s = e

    def describe(self) -> dict[str, Any]:
        return {"pool": self.root, "format": "fiftyone"}
