"""The folder source `ImagePool`: the unlabeled pool D as a folder tree or a list file of images, decoded to RGB uint8.

Pools in other places (a list of URIs, an object-store prefix, Parquet / WebDataset shards, a Hugging
Face `save_to_disk` folder) are this package's other sources; `open_pool` picks one from what it is
given. They all share `PoolSource`'s interface, which `ImagePool` implements for local folders.

Ids are the POSIX paths relative to the pool root (sorted), stable across machines. A file that
cannot be decoded (corrupt, truncated, zero bytes, not an image, too many pixels, missing) is
recorded in `ImagePool.errors` with its reason and skipped by `iter_items`; it never stops a run.
Decoding rules: `blindspots.data.sources.decode` (re-exported here).
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path, PurePosixPath
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
from tqdm.auto import tqdm

from blindspots.data.sources.base import PoolItem, PoolSource, RawItem
from blindspots.data.sources.decode import (DEFAULT_MAX_PIXELS, ImageDecodeError, check_max_pixels, decode_image,
                                            normalise_extensions, open_file_or_bytes, open_image,
                                            pillow_extensions)

log = logging.getLogger(__name__)

ONE_READ_MAX_BYTES = 64 << 20  # `load_hashed` reads larger files through `load` (header checked before the bytes)

__all__ = ["ImageDecodeError", "decode_image", "open_image", "PoolItem", "ImagePool", "pillow_extensions",
           "DEFAULT_MAX_PIXELS"]


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


class ImagePool(PoolSource):
    """An unlabeled image pool: every image under `root` (recursively), or those in a list file.

    root: the pool's folder; ids are POSIX paths relative to it, sorted.
    list_file: optional text file, one path per line (relative to root, or absolute under root);
        blank lines and lines starting with '#' are ignored. Entries are taken as listed (no
        extension filter); an entry outside root (absolute elsewhere, or '..') is a ValueError.
        Listed files that are missing, or are links resolving outside root, are kept as ids and
        reported as errors when read (no per-line disk access at construction).
    extensions: file extensions to collect when walking the folder (case-insensitive, with or
        without the dot); default: everything Pillow can open.
    max_pixels: per-image pixel limit passed to `decode_image` (50 M by default).

    Hidden files and folders (name starting with '.') are skipped. Symbolic links: a linked
    *file* is included only if its target resolves inside root; links pointing outside root are
    excluded (listed in `.excluded` with the reason, and in `.refused`, so that a scan gives them
    an error row instead of losing them). A dangling link inside root stays an id and reads as an
    error ("dangling symlink"). Linked folders are not followed (no cycles).
    `path(id)` refuses any id that is not in the pool and re-checks that the resolved path is
    still inside root.
    """

    def __init__(self, root: str | Path, *, list_file: str | Path | None = None,
                 extensions: Iterable[str] | None = None,
                 max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        root_path = Path(root)
        self.list_file = None if list_file is None else str(Path(list_file).resolve())
        self._extensions_given = None if extensions is None else sorted(
            [extensions] if isinstance(extensions, str) else extensions)
        if not root_path.is_dir():
            raise ValueError(f"root: expected an existing folder, got {str(root)!r}")
        self.max_pixels = check_max_pixels(max_pixels)
        self.root = root_path.resolve()
        self.extensions = self._normalise_extensions(extensions)
        self.errors: dict[str, str] = {}
        self.excluded: dict[str, str] = {}
        self._refused: dict[str, str] = {}  # image files found but not read (links leaving root): id -> reason
        if list_file is not None:
            ids = self._read_list(Path(list_file))
        else:
            ids = self._walk()
        self._ids: list[str] | None = sorted(ids)
        self._id_array = pa.array(self._ids, pa.string())
        self._id_set = frozenset(self._ids)
        log.info("pool %s: %d images (%d excluded)", self.root, len(self.ids), len(self.excluded))

    # -- construction --

    @staticmethod
    def _normalise_extensions(extensions: Iterable[str] | None) -> frozenset[str]:
        return normalise_extensions(extensions)

    def _walk(self) -> list[str]:
        ids: list[str] = []
        stack = [self.root]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError as exc:
                rel = folder.relative_to(self.root).as_posix()
                self.excluded[rel + "/"] = f"cannot list folder ({exc.strerror or exc})"
                continue
            for entry in entries:
                if _is_hidden(entry.name):
                    continue
                path = Path(entry.path)
                rel = path.relative_to(self.root).as_posix()
                if entry.is_symlink():
                    if entry.is_dir():
                        self.excluded[rel] = "symlinked folder (not followed)"
                        continue
                    if os.path.splitext(entry.name)[1].lower() not in self.extensions:
                        continue
                    target = path.resolve()
                    if not _inside(target, self.root):
                        reason = "symlink pointing outside the pool root"
                        if not target.exists():
                            reason += " (dangling: its target does not exist)"
                        self.excluded[rel] = self._refused[rel] = reason
                        continue
                    ids.append(rel)
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(path)
                elif entry.is_file(follow_symlinks=False):
                    if os.path.splitext(entry.name)[1].lower() in self.extensions:
                        ids.append(rel)
        return ids

    def _read_list(self, list_file: Path) -> list[str]:
        try:
            text = list_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"list_file: expected a readable text file, got {str(list_file)!r} "
                             f"({exc.strerror or exc})") from None
        ids: set[str] = set()
        outside: list[str] = []
        for line in text.splitlines():
            entry = line.strip()
            if not entry or entry.startswith("#"):
                continue
            p = Path(entry)
            full = p if p.is_absolute() else self.root / p
            # normalise '..' lexically, so traversal is caught without touching the disk
            norm = Path(os.path.normpath(full))
            if not _inside(norm, self.root) or norm == self.root:
                outside.append(entry)
                continue
            ids.add(norm.relative_to(self.root).as_posix())
        if outside:
            shown = ", ".join(repr(e) for e in outside[:5])
            raise ValueError(f"list_file: expected paths inside the pool root {str(self.root)!r}, "
                             f"got {len(outside)} outside it, e.g. {shown}")
        return list(ids)

    # -- access --

    def __contains__(self, image_id: object) -> bool:
        return image_id in self._id_set

    def list_ids(self) -> list[str]:
        return list(self.ids)

    def describe(self) -> dict:
        return {"pool": str(self.root), "list_file": self.list_file, "format": "folder",
                **({"extensions": self._extensions_given} if self._extensions_given else {})}

    def read(self, ids) -> Iterator[RawItem]:
        """The file bytes of `ids` (`PoolSource.read`); unreadable files give their `load` reason."""
        for image_id in ids:
            try:
                path = self.path(image_id)
                open_file_or_bytes(path)
                yield RawItem(image_id, path.read_bytes())
            except ImageDecodeError as exc:
                yield RawItem(image_id, None, exc.reason)
            except (OSError, ValueError) as exc:
                yield RawItem(image_id, None, str(exc))

    def __repr__(self) -> str:
        return f"ImagePool(root={str(self.root)!r}, images={len(self.ids)}, errors={len(self.errors)})"

    def path(self, image_id: str) -> Path:
        """Absolute path of a pool image. ValueError for an id that is not in the pool."""
        if image_id not in self._id_set:
            raise ValueError(f"image_id: expected an id of this pool, got {image_id!r}")
        path = self.root / PurePosixPath(image_id)
        if not _inside(path.resolve(), self.root):  # the file may have been replaced by a link since
            raise ValueError(f"image_id: {image_id!r} now resolves outside the pool root")
        return path

    def content_hash(self, image_id: str) -> str:
        """Hex blake2b (128-bit) digest of the image file's bytes: equal for exact duplicates."""
        h = hashlib.blake2b(digest_size=16)
        with self.path(image_id).open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    def load_hashed(self, image_id: str) -> tuple[np.ndarray, str | None]:
        """(uint8 [H, W, 3] RGB, `content_hash`) from one read of the file: its bytes are hashed and
        decoded from memory (a second read for the hash cost about 0.06 ms an image, 10% of a PNG
        scene's decode). Same image, errors and `.errors` bookkeeping as `load`; the hash is None
        when a bad first read is retried through `load` and the file then reads well (it changed)."""
        path = self.path(image_id)
        try:
            open_file_or_bytes(path)  # the checks `load` makes first (e.g. a FIFO is not read)
            if path.stat().st_size > ONE_READ_MAX_BYTES:  # e.g. a video named .jpg: header check first
                raise OSError("large file: read by `load`, which checks the header before decoding")
            data = path.read_bytes()
            image = decode_image(data, max_pixels=self.max_pixels)
        except (OSError, ImageDecodeError):  # rare: `load` gives the reason (path-based checks and wording)
            image = self.load(image_id)
            try:
                return image, self.content_hash(image_id)
            except (OSError, ValueError):
                return image, None
        self.errors.pop(image_id, None)
        return image, hashlib.blake2b(data, digest_size=16).hexdigest()

    def load(self, image_id: str) -> np.ndarray:
        """uint8 [H, W, 3] RGB of one image; raises ImageDecodeError (recorded in `.errors`)."""
        path = self.path(image_id)
        try:
            image = decode_image(path, max_pixels=self.max_pixels)
        except ImageDecodeError as exc:
            if exc.reason == "file not found" and path.is_symlink():
                exc = ImageDecodeError(f"dangling symlink (its target {os.readlink(path)!r} does not exist)")
            self.errors[image_id] = exc.reason
            raise ImageDecodeError(exc.reason, image_id) from None
        self.errors.pop(image_id, None)
        return image

    def iter_items(self, ids: Iterable[str] | None = None, *, progress: bool = False) -> Iterator[PoolItem]:
        """Yield a PoolItem per id (all ids by default, in order); never raises for a bad file.

        ids: a subset to read (e.g. the ids a resumed scan has not done yet); every id must be
        in the pool or in `.refused` (ValueError otherwise, before anything is read); a refused
        id yields an item with its reason as the error.
        progress: show a tqdm bar.
        """
        return self._items(ids, progress, hashed=False)

    def iter_hashed_items(self, ids: Iterable[str] | None = None, *, progress: bool = False) -> Iterator[PoolItem]:
        """`iter_items`, each good item with its `content_hash` from the same read of the file
        (`load_hashed`): what a scan reads, so that every file is read once."""
        return self._items(ids, progress, hashed=True)

    def _items(self, ids: Iterable[str] | None, progress: bool, hashed: bool) -> Iterator[PoolItem]:
        todo = self.ids if ids is None else list(ids)
        if ids is not None:
            unknown = [i for i in todo if i not in self._id_set and i not in self.refused]
            if unknown:
                raise ValueError(f"ids: expected ids of this pool, got {len(unknown)} unknown, "
                                 f"e.g. {unknown[:5]}")
        for image_id in tqdm(todo, desc="reading pool", unit="img", disable=not progress):
            if image_id in self.refused and image_id not in self._id_set:
                # said as loudly as an unreadable file: a pool of links to elsewhere is all errors
                log.warning("skipping %s: %s (links may only point inside the pool folder: scan the folder "
                            "they point into, with a list file for a subset)", image_id, self.refused[image_id])
                yield PoolItem(image_id, None, self.refused[image_id])
                continue
            try:
                image, digest = self.load_hashed(image_id) if hashed else (self.load(image_id), None)
            except ImageDecodeError as exc:
                log.warning("skipping %s: %s", image_id, exc.reason)
                yield PoolItem(image_id, None, exc.reason)
            except ValueError as exc:  # e.g. swapped for a link out of root mid-run
                self.errors[image_id] = str(exc)
                log.warning("skipping %s: %s", image_id, exc)
                yield PoolItem(image_id, None, str(exc))
            else:
                yield PoolItem(image_id, image, None, digest)

    def __iter__(self) -> Iterator[PoolItem]:
        return self.iter_items()
