"""Shared fixtures (kept small). Owned by the data helper; other test files may use, not edit.

- `tmp_pool`: builds an image folder tree in tmp_path and returns its root.
- `write_image`: writes a uint8 array (or raw bytes) to a path, format from the extension.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
from hypothesis import settings
from PIL import Image

torch.set_num_threads(1)

# CI machines are noisy: no per-example time limit unless a test sets its own.
settings.register_profile("blindspots", deadline=None)
settings.load_profile("blindspots")


def _write(path: Path, content: np.ndarray | bytes | Image.Image, **save_kwargs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, (bytes, bytearray)):
        path.write_bytes(bytes(content))
    else:
        img = content if isinstance(content, Image.Image) else Image.fromarray(np.asarray(content))
        img.save(path, **save_kwargs)
    return path


def _truncated_png(rng: np.random.Generator) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, format="PNG")
    data = buf.getvalue()
    return data[: len(data) // 2]


@pytest.fixture
def write_image() -> Callable[..., Path]:
    """write_image(path, uint8 array | PIL image | bytes, **pillow_save_kwargs) -> path."""
    return _write


@pytest.fixture
def tmp_pool(tmp_path: Path) -> Callable[..., Path]:
    """Builder: tmp_pool(n=4, size=32, seed=0, bad=False, files=None) -> pool root.

    n random RGB images `img_000.png`, ... (every third as JPEG, every fourth under `sub/`);
    bad=True adds undecodable files under `bad/` (corrupt, truncated, empty, text-as-PNG), so
    ids starting with 'bad/' are exactly the ones that must fail; files: extra
    {relative path: array | bytes} written as given.
    """
    counter = iter(range(1_000_000))

    def build(n: int = 4, size: int = 32, seed: int = 0, bad: bool = False,
              files: dict[str, np.ndarray | bytes] | None = None) -> Path:
        root = tmp_path / f"pool{next(counter)}"
        root.mkdir()
        rng = np.random.default_rng(seed)
        for i in range(n):
            ext = ".jpg" if i % 3 == 2 else ".png"
            sub = "sub/" if i % 4 == 3 else ""
            _write(root / f"{sub}img_{i:03d}{ext}", rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
        if bad:
            _write(root / "bad/corrupt.png", b"\x89PNG\r\n\x1a\n" + rng.bytes(200))
            _write(root / "bad/truncated.png", _truncated_png(rng))
            _write(root / "bad/empty.png", b"")
            _write(root / "bad/text.png", b"this is not an image\n")
        for rel, content in (files or {}).items():
            _write(root / rel, content)
        return root

    return build
