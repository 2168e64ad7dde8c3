"""MediaPipe's selfie (person) segmenters as blindspots callables.

The two models are the `.tflite` files shipped inside the `mediapipe==0.10.21` wheel on PyPI
(`mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite`, 256x256 input, and
`selfie_segmentation_landscape.tflite`, 144x256 input). Newer mediapipe wheels no longer ship
them, but their runtime (`mediapipe.tasks.python.vision.ImageSegmenter`, mediapipe 1.2.2) still
runs them. `examples/own_models.py` extracts the files into a folder; this module finds them via
the environment variable `OWN_MODELS_DIR` (default `runs/own_models/models`).

Each callable maps uint8 [N, H, W, 3] RGB -> float32 [N, 1, H, W] = p(person) at the image's own
size. blindspots reads a one-channel probability output as a binary model [1 - p, p]
(docs/models.md); name the two classes with `?classes=person_classes.txt`.

Use (from `examples/`, which `module:function` specs import from):
    blindspots scan POOL -t 'selfie=own_models_lib.mediapipe_seg:selfie_general?classes=CLASSES' ...
The callables take no options, so the model folder comes from the environment (OWN_MODELS_DIR).
"""
from __future__ import annotations

import atexit
import os
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

GENERAL = "selfie_segmentation.tflite"
LANDSCAPE = "selfie_segmentation_landscape.tflite"
CLASSES = ("background", "person")


def models_dir() -> Path:
    """The folder holding the extracted `.tflite` files (env OWN_MODELS_DIR)."""
    return Path(os.environ.get("OWN_MODELS_DIR", "runs/own_models/models"))


def _segmenter(file_name: str):
    """The ImageSegmenter of `models_dir() / file_name` (one per file and process)."""
    return _segmenter_at(str((models_dir() / file_name).resolve()))


@lru_cache(maxsize=None)
def _segmenter_at(path_str: str):
    """One mediapipe ImageSegmenter per model path and process (creating one costs ~50 ms)."""
    from mediapipe.tasks.python import BaseOptions, vision

    path = Path(path_str)
    if not path.is_file():
        raise FileNotFoundError(f"model file: expected {path} (run examples/own_models.py once, "
                                "or set OWN_MODELS_DIR), got no such file")
    opts = vision.ImageSegmenterOptions(base_options=BaseOptions(model_asset_path=str(path)),
                                        output_confidence_masks=True, output_category_mask=False)
    seg = vision.ImageSegmenter.create_from_options(opts)
    # close while mediapipe's worker threads still run: left to __del__ at interpreter exit it
    # prints a TypeError traceback, and a plain atexit hook runs too late (RuntimeError)
    getattr(threading, "_register_atexit", atexit.register)(seg.close)
    return seg


def person_probability(images: np.ndarray, file_name: str) -> np.ndarray:
    """uint8 [N, H, W, 3] (or a list of [H, W, 3]) -> float32 [N, H, W] p(person)."""
    import mediapipe as mp

    seg = _segmenter(file_name)
    out = []
    for img in images:
        img = np.ascontiguousarray(np.asarray(img, dtype=np.uint8)[..., :3])
        if img.ndim != 3:
            raise ValueError(f"images: expected uint8 [N, H, W, 3], got an image of shape {img.shape}")
        res = seg.segment(mp.Image(image_format=mp.ImageFormat.SRGB, data=img))
        p = np.asarray(res.confidence_masks[0].numpy_view(), dtype=np.float32).reshape(img.shape[:2])
        out.append(np.clip(p, 0.0, 1.0))
    return np.stack(out)


def selfie_general(images: np.ndarray) -> np.ndarray:
    """MediaPipe selfie segmentation, general model (256x256): uint8 [N, H, W, 3] -> p(person) [N, 1, H, W]."""
    return person_probability(images, GENERAL)[:, None]


def selfie_landscape(images: np.ndarray) -> np.ndarray:
    """MediaPipe selfie segmentation, landscape model (144x256): uint8 [N, H, W, 3] -> p(person) [N, 1, H, W]."""
    return person_probability(images, LANDSCAPE)[:, None]
