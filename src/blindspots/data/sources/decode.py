"""Decoding one image file (or its bytes) to RGB uint8: the rules every pool source follows.

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

import io
import logging
import os
from pathlib import Path
from typing import Iterable

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError
from blindspots._validation import check_max_pixels

log = logging.getLogger(__name__)

DEFAULT_MAX_PIXELS = 50_000_000

__all__ = ["ImageDecodeError", "decode_image", "open_image", "pillow_extensions", "DEFAULT_MAX_PIXELS",
           "check_max_pixels", "open_file_or_bytes",
           "normalise_extensions"]


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


def normalise_extensions(extensions: Iterable[str] | None) -> frozenset[str]:
    """'.png' / 'PNG' / ['jpg', '.png'] -> {'.png', ...}; None: every extension Pillow decodes."""
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



# --- decoding ----------------------------------------------------------------------------------

_SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")


BLEND_ROWS_PIXELS = 1 << 20  # pixels blended at a time: the uint16 temporaries stay ~10 MB, whatever the image


def _composite_over_white(rgba: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 4] -> uint8 [H, W, 3], alpha-blended over a white background.

    Blended a band of rows at a time into the output: the whole image at once took five uint16
    temporaries of its size (about 300 MB above the result for a 13 MP photo, in the scan's reader
    thread while the models ran); a band keeps them to a few MB, with the same bits."""
    h, w = rgba.shape[:2]
    out = np.empty((h, w, 3), dtype=np.uint8)
    step = max(1, BLEND_ROWS_PIXELS // max(1, w))
    for s in range(0, h, step):
        band = rgba[s:s + step]
        alpha = band[..., 3:4].astype(np.uint16)
        rgb = band[..., :3].astype(np.uint16)
        # integer blend with rounding: (c*a + 255*(255-a) + 127) // 255
        rgb *= alpha
        alpha = 255 * (255 - alpha) + 127
        rgb += alpha
        rgb //= 255
        out[s:s + step] = rgb
    return out


def _to_rgb(img: Image.Image) -> np.ndarray:
    """Any Pillow image -> uint8 [H, W, 3] (rules in the module docstring)."""
    mode = img.mode
    if mode in _ALPHA_MODES or (mode in ("P", "L", "RGB") and "transparency" in img.info):
        rgba = img if mode == "RGBA" else img.convert("RGBA")  # no second copy of an RGBA image
        return _composite_over_white(np.asarray(rgba, dtype=np.uint8))
    if mode == "RGB":
        return np.asarray(img, dtype=np.uint8)
    if mode in _SIXTEEN_BIT_MODES:
        grey = np.asarray(img).astype(np.int64)
        grey = ((np.clip(grey, 0, 65535) + 128) // 257).astype(np.uint8)  # round(v / 257)
        return np.repeat(grey[..., None], 3, axis=2)
    if mode == "F":
        return np.asarray(img.convert("L").convert("RGB"), dtype=np.uint8)
    return np.asarray(img.convert("RGB"), dtype=np.uint8)


def open_file_or_bytes(source: str | Path | bytes | bytearray) -> tuple[io.BytesIO | Path, str]:
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


def open_image(source: str | Path | bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Open, size-check and fully decode one image; EXIF orientation applied; mode unchanged.

    The returned Pillow image is loaded and detached from the file. Raises ImageDecodeError
    (empty, missing, not an image, too many pixels, corrupt or truncated). Used by
    `decode_image` and by the mask reader, so both follow the same rules.
    """
    max_pixels = check_max_pixels(max_pixels)
    fp, label = open_file_or_bytes(source)
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
