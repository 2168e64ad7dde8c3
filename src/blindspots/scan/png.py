"""A minimal PNG encoder for class-index maps: greyscale, 8 or 16 bits, no filter, one zlib stream.

The scan writes one map per image and model, so encoding sits on its critical path. Pillow's
encoder spends most of its time in per-row filter selection; for label maps (few values, long
runs) plain rows compressed by zlib at level 1 are about 3x faster and no larger. The output is a
standard PNG (signature, IHDR, one IDAT, IEND; CRCs per chunk) that Pillow and browsers read back.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IEND = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(data, zlib.crc32(kind)))


def encode_index_png(index_map: np.ndarray, *, level: int = 1) -> bytes:
    """PNG bytes of a class-index map.

    index_map: uint8 [H, W] (8-bit greyscale) or uint16 [H, W] (16-bit, for more than 256 classes).
    level: zlib compression level 0-9 (1: fast; maps are written once per image and model).
    """
    m = np.asarray(index_map)
    if m.ndim != 2 or m.shape[0] < 1 or m.shape[1] < 1:
        raise ValueError(f"index_map: expected a non-empty 2-D array [H, W], got shape {m.shape}")
    if m.dtype == np.uint8:
        depth, rows = 8, m
    elif m.dtype == np.uint16:
        depth, rows = 16, m.astype(">u2").view(np.uint8).reshape(m.shape[0], -1)  # PNG is big-endian
    else:
        raise ValueError(f"index_map: expected dtype uint8 or uint16, got {m.dtype}")
    h, w = m.shape
    raw = np.zeros((h, rows.shape[1] + 1), dtype=np.uint8)  # each row: filter byte 0 (None), then pixels
    raw[:, 1:] = rows
    header = struct.pack(">IIBBBBB", w, h, depth, 0, 0, 0, 0)  # greyscale, deflate, no filter, no interlace
    return b"".join((_SIGNATURE, _chunk(b"IHDR", header), _chunk(b"IDAT", zlib.compress(raw, level)), _IEND))
