"""The unlabeled image pool D: a folder tree or a list file of images, decoded to RGB uint8.

Ids are the POSIX paths relative to the pool root (sorted), stable across machines. A file that
cannot be decoded (corrupt, truncated, zero bytes, not an image, too many pixels, missing) is
recorded in `ImagePool.errors` with its reason and skipped by `iter_items`; it never stops a run.

Decoding rules (`decode_image`):
- EXIF orientation is applied (`PIL.ImageOps.exif_transpose`); multi-frame files (GIF, TIFF)
  give their first frame.
- Grey ('1', 'L') and palette ('P') images become RGB. 16-bit grey ('I;16*', and 'I', which is
  how Pillow opens 16-bit PNG/TIFF) is scaled by the range of the type: value / 257, rounded,
  values outside 0..65535 clipped; never a per-image stretch. Float ('F') is clipped to 0..255
  (Pillow's own conversion).
- Images with transparency (RGBA, LA, PA, palette with a transparent index) are composited
  over white, which is how a viewer (and a human rater) sees them.
- The pixel count is checked from the header before any pixel is decoded. Pillow's own
  decompression-bomb guard (`Image.MAX_IMAGE_PIXELS`, never changed here) still applies on
  top of `max_pixels`, so images above twice Pillow's limit are refused even if `max_pixels`
  is larger.
- Truncated files are errors: the full `load()` runs with `ImageFile.LOAD_TRUNCATED_IMAGES`
  left False.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable, Iterator

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError
from tqdm.auto import tqdm

log = logging.getLogger(__name__)

DEFAULT_MAX_PIXELS = 50_000_000
ONE_READ_MAX_BYTES = 64 << 20  # `load_hashed` reads larger files through `load` (header checked before the bytes)

__all__ = ["ImageDecodeError", "decode_image", "open_image", "PoolItem", "ImagePool", "pillow_extensions",
           "DEFAULT_MAX_PIXELS"]


class ImageDecodeError(ValueError):
    """An image file that cannot be turned into RGB uint8 pixels. `.reason` says why."""

    def __init__(self, reason: str, source: str | None = None) -> None:
        self.reason = reason
        self.source = source
        super().__init__(f"{source}: {reason}" if source else reason)


# Formats Pillow "opens" but cannot decode to pixels by itself: MPEG (header only), EPS/PS
# (needs Ghostscript, and runs PostScript). Stub plugins (HDF5, GRIB, BUFR, WMF) are dropped below.
_NOT_DECODABLE = frozenset({"MPEG", "EPS"})


def pillow_extensions() -> frozenset[str]:
    """Lower-case extensions (with the dot) of the formats Pillow can decode here, e.g. '.jpg'.

    Excludes formats Pillow only identifies (stub plugins such as '.h5', '.grib'; '.mpg'; '.eps').
    """
    Image.init()  # registers the plugins; idempotent
    out = set()
    for ext, fmt in Image.registered_extensions().items():
        factory = Image.OPEN.get(fmt, (None,))[0]
        if factory is None or fmt in _NOT_DECODABLE:
            continue
        if isinstance(factory, type) and issubclass(factory, ImageFile.StubImageFile):
            continue
        out.add(ext.lower())
    return frozenset(out)


# --- decoding ----------------------------------------------------------------------------------

_SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")


def _composite_over_white(rgba: np.ndarray, rows: int = 256) -> np.ndarray:
    """uint8 [H, W, 4] -> uint8 [H, W, 3], alpha-blended over a white background.

    Blended `rows` rows at a time: the uint16 temporaries of a whole 13-megapixel photo took
    300 MB more than the result (the scan's peak memory), a strip of rows takes a few MB."""
    out = np.empty(rgba.shape[:2] + (3,), dtype=np.uint8)
    for top in range(0, rgba.shape[0], rows):
        part = rgba[top:top + rows]
        alpha = part[..., 3:4].astype(np.uint16)
        rgb = part[..., :3].astype(np.uint16)
        # integer blend with rounding: (c*a + 255*(255-a) + 127) // 255
        out[top:top + rows] = (rgb * alpha + 255 * (255 - alpha) + 127) // 255
    return out


def _to_rgb(img: Image.Image) -> np.ndarray:
    """Any Pillow image -> uint8 [H, W, 3] (rules in the module docstring)."""
    mode = img.mode
    if mode in _ALPHA_MODES or (mode in ("P", "L", "RGB") and "transparency" in img.info):
        return _composite_over_white(np.asarray(img.convert("RGBA"), dtype=np.uint8))
    if mode == "RGB":
        return np.asarray(img, dtype=np.uint8)
    if mode in _SIXTEEN_BIT_MODES:
        grey = np.asarray(img).astype(np.int64)
        grey = ((np.clip(grey, 0, 65535) + 128) // 257).astype(np.uint8)  # round(v / 257)
        return np.repeat(grey[..., None], 3, axis=2)
    if mode == "F":
        return np.asarray(img.convert("L").convert("RGB"), dtype=np.uint8)
    return np.asarray(img.convert("RGB"), dtype=np.uint8)


def _open_source(source: str | Path | bytes | bytearray) -> tuple[io.BytesIO | Path, str]:
    """Check the source exists and is non-empty; return something Image.open accepts and a label."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) == 0:
            raise ImageDecodeError("empty file (0 bytes)", "<bytes>")
        return io.BytesIO(bytes(source)), "<bytes>"
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"source: expected a path or bytes, got {type(source).__name__}")
    path = Path(source)
    label = str(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ImageDecodeError("file not found", label) from None
    except OSError as exc:
        raise ImageDecodeError(f"cannot read file ({exc.strerror or exc})", label) from None
    if not path.is_file():
        raise ImageDecodeError("not a regular file", label)
    if st.st_size == 0:
        raise ImageDecodeError("empty file (0 bytes)", label)
    return path, label


def _check_max_pixels(max_pixels: int) -> int:
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, (int, np.integer)) or max_pixels < 1:
        raise ValueError(f"max_pixels: expected a positive integer, got {max_pixels!r}")
    return int(max_pixels)


def open_image(source: str | Path | bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Open, size-check and fully decode one image; EXIF orientation applied; mode unchanged.

    The returned Pillow image is loaded and detached from the file. Raises ImageDecodeError
    (empty, missing, not an image, too many pixels, corrupt or truncated). Used by
    `decode_image` and by the mask reader, so both follow the same rules.
    """
    max_pixels = _check_max_pixels(max_pixels)
    fp, label = _open_source(source)
    try:
        img_ctx = Image.open(fp)
    except UnidentifiedImageError:
        raise ImageDecodeError("not an image (format not recognised)", label) from None
    except Image.DecompressionBombError as exc:
        raise ImageDecodeError(f"too many pixels (Pillow's decompression-bomb limit: {exc})", label) from None
    except (OSError, SyntaxError, ValueError, EOFError, MemoryError) as exc:
        raise ImageDecodeError(f"corrupt header ({type(exc).__name__}: {exc})", label) from None
    with img_ctx as img:
        width, height = img.size
        if width < 1 or height < 1:
            raise ImageDecodeError(f"empty image ({width}×{height} px)", label)
        if width * height > max_pixels:
            raise ImageDecodeError(
                f"too many pixels ({width}×{height} = {width * height:,} > max_pixels={max_pixels:,})", label)
        try:
            img.load()  # full decode; a truncated file raises here (LOAD_TRUNCATED_IMAGES stays False)
        except MemoryError:
            raise ImageDecodeError(f"out of memory decoding {width}×{height} px", label) from None
        except Exception as exc:  # Pillow plugins raise many types (OSError, SyntaxError, struct.error, ...)
            reason = "truncated" if "truncated" in str(exc).lower() else "corrupt"
            raise ImageDecodeError(f"{reason} ({type(exc).__name__}: {exc})", label) from None
        try:
            return ImageOps.exif_transpose(img)  # a new image (a copy when there is nothing to do)
        except Exception as exc:  # a broken EXIF block should not lose a good image
            log.warning("%s: ignoring unreadable EXIF orientation (%s)", label, exc)
            return img.copy()


def decode_image(source: str | Path | bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Decode one image file (or its bytes) to uint8 [H, W, 3] RGB.

    source: a path or the file's bytes. max_pixels: refuse images with more than this many
    pixels (width × height, read from the header before decoding); 50 M by default.
    Raises ImageDecodeError (a ValueError) with `.reason` for anything that is not a readable
    image: empty, missing, not an image, too many pixels, corrupt or truncated.
    """
    img = open_image(source, max_pixels=max_pixels)
    try:
        rgb = _to_rgb(img)
    except Exception as exc:
        label = "<bytes>" if isinstance(source, (bytes, bytearray, memoryview)) else str(source)
        raise ImageDecodeError(f"cannot convert mode {img.mode!r} to RGB ({exc})", label) from None
    return np.ascontiguousarray(rgb)


# --- the pool ----------------------------------------------------------------------------------

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


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


class ImagePool:
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
        if not root_path.is_dir():
            raise ValueError(f"root: expected an existing folder, got {str(root)!r}")
        self.max_pixels = _check_max_pixels(max_pixels)
        self.root = root_path.resolve()
        self.extensions = self._normalise_extensions(extensions)
        self.errors: dict[str, str] = {}
        self.excluded: dict[str, str] = {}
        self.refused: dict[str, str] = {}  # image files found but not read (links leaving root): id -> reason
        if list_file is not None:
            ids = self._read_list(Path(list_file))
        else:
            ids = self._walk()
        self.ids: list[str] = sorted(ids)
        self._id_set = frozenset(self.ids)
        log.info("pool %s: %d images (%d excluded)", self.root, len(self.ids), len(self.excluded))

    # -- construction --

    @staticmethod
    def _normalise_extensions(extensions: Iterable[str] | None) -> frozenset[str]:
        if extensions is None:
            return pillow_extensions()
        if isinstance(extensions, str):
            extensions = [extensions]
        out = set()
        for ext in extensions:
            if not isinstance(ext, str) or not ext.strip(".") or "/" in ext:
                raise ValueError(f"extensions: expected file extensions like '.png' or 'jpg', got {ext!r}")
            out.add("." + ext.lower().lstrip("."))
        if not out:
            raise ValueError("extensions: expected at least one extension, got an empty collection")
        return frozenset(out)

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
                        self.excluded[rel] = self.refused[rel] = reason
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

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, image_id: object) -> bool:
        return image_id in self._id_set

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
            _open_source(path)  # the checks `load` makes first (e.g. a FIFO is not read)
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
