"""PaddleOCR text detectors (DBNet, ONNX) shipped in RapidOCR wheels, as blindspots callables.

- `det_v4`: `ch_PP-OCRv4_det_infer.onnx` from `rapidocr-onnxruntime==1.4.4` (saved as `ppocr_v4_det.onnx`);
- `det_v6`: `PP-OCRv6_det_small.onnx` from `rapidocr==3.10.0` (saved as `ppocr_v6_det_small.onnx`).
Both output one sigmoid channel p(text). Found in `OWN_MODELS_DIR` (see `mediapipe_seg.models_dir`).

Why a callable and not the `.onnx` spec: the networks need sides that are multiples of 32, RapidOCR's
normalisation (BGR, mean = std = 0.5), and a one-channel output read as p(text); blindspots' ONNX spec
has none of these today (docs/own_models.md, friction 3). uint8 [N, H, W, 3] RGB ->
float32 [N, 2, H, W] = [1 - p, p] at the image's size.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from PIL import Image

from own_models_lib.mediapipe_seg import models_dir

V4 = "ppocr_v4_det.onnx"
V6 = "ppocr_v6_det_small.onnx"
MAX_SIDE = 960  # the network input's longest side at most (RapidOCR's default limit is 736 for the shortest)


@lru_cache(maxsize=None)
def _session(path_str: str):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # the example runs on shared cores
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(path_str, opts, providers=["CPUExecutionProvider"])


def _input_size(h: int, w: int) -> tuple[int, int]:
    """(h', w'): multiples of 32, scaled so that the longest side is at most MAX_SIDE."""
    s = min(1.0, MAX_SIDE / max(h, w))
    return max(32, int(round(h * s / 32)) * 32), max(32, int(round(w * s / 32)) * 32)


def text_probability(images: np.ndarray, file_name: str) -> np.ndarray:
    """uint8 [N, H, W, 3] (or a list of [H, W, 3]) -> float32 [N, H, W] p(text) at each image's size."""
    path = models_dir() / file_name
    if not path.is_file():
        raise FileNotFoundError(f"model file: expected {path} (run examples/own_models.py --text once, "
                                "or set OWN_MODELS_DIR), got no such file")
    sess = _session(str(path.resolve()))
    name = sess.get_inputs()[0].name
    out = []
    for img in images:
        img = np.asarray(img, dtype=np.uint8)[..., :3]
        if img.ndim != 3:
            raise ValueError(f"images: expected uint8 [N, H, W, 3], got an image of shape {img.shape}")
        h, w = img.shape[:2]
        ih, iw = _input_size(h, w)
        x = np.asarray(Image.fromarray(img).resize((iw, ih), Image.BILINEAR), dtype=np.float32)
        x = (x[..., ::-1] / 255.0 - 0.5) / 0.5  # RGB -> BGR, RapidOCR's normalisation
        p = sess.run(None, {name: np.ascontiguousarray(x.transpose(2, 0, 1)[None])})[0][0, 0]
        p = np.asarray(Image.fromarray(p.astype(np.float32), mode="F").resize((w, h), Image.BILINEAR))
        out.append(np.clip(p, 0.0, 1.0))
    return np.stack(out).astype(np.float32)


def det_v4(images: np.ndarray) -> np.ndarray:
    """PP-OCRv4 text detector: uint8 [N, H, W, 3] -> float32 [N, 2, H, W] [p(no text), p(text)]."""
    p = text_probability(images, V4)
    return np.stack([1.0 - p, p], axis=1)


def det_v6(images: np.ndarray) -> np.ndarray:
    """PP-OCRv6 small text detector: uint8 [N, H, W, 3] -> float32 [N, 2, H, W]."""
    p = text_probability(images, V6)
    return np.stack([1.0 - p, p], axis=1)
