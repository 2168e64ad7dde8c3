"""Put the real pretrained model files of the example in a folder, from packages on PyPI.

- MediaPipe selfie segmentation, general (256x256) and landscape (144x256): `.tflite` files inside
  the `mediapipe==0.10.21` wheel (`mediapipe/modules/selfie_segmentation/`), Apache-2.0 (the
  wheel's LICENSE). Run with the runtime of the current `mediapipe` (1.2.2), see `mediapipe_seg.py`.
- PP-OCRv4 text detector (DBNet, a one-channel sigmoid probability map): `ch_PP-OCRv4_det_infer.onnx`
  inside the `rapidocr-onnxruntime==1.4.4` wheel (`rapidocr_onnxruntime/models/`), Apache-2.0.
- PP-OCRv6 small text detector: `PP-OCRv6_det_small.onnx` inside `rapidocr==3.10.0`, Apache-2.0.

The wheels are fetched with `pip download --no-deps` (a registry client; the weights are in the
wheel, nothing else is downloaded), or read from a folder of wheels you already have.
"""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

# file name in the output folder -> (pip requirement, wheel file-name prefix, path inside the wheel)
MODEL_FILES = {
    "selfie_segmentation.tflite": (
        "mediapipe==0.10.21", "mediapipe-0.10.21-",
        "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite"),
    "selfie_segmentation_landscape.tflite": (
        "mediapipe==0.10.21", "mediapipe-0.10.21-",
        "mediapipe/modules/selfie_segmentation/selfie_segmentation_landscape.tflite"),
    "ppocr_v4_det.onnx": (
        "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime-1.4.4-",
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"),
    "ppocr_v6_det_small.onnx": (
        "rapidocr==3.10.0", "rapidocr-3.10.0-",
        "rapidocr/models/PP-OCRv6_det_small.onnx"),
}
# classes files (`?classes=FILE` in a spec, docs/models.md): the one-channel models are binary
CLASS_FILES = {
    "person_classes.txt": "background 0 0 0\nperson 220 20 60\n",
    "text_classes.txt": "background 0 0 0\ntext 255 140 0\n",
}
# the wheels are binary per platform; any one holds the same model files
_PIP_PLATFORM = ["--only-binary=:all:", "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64"]


def _find_wheel(wheels: Path, prefix: str) -> Path | None:
    found = sorted(wheels.glob(prefix + "*.whl"))
    return found[0] if found else None


def fetch_wheel(requirement: str, prefix: str, wheels: Path) -> Path:
    """The wheel of `requirement` in `wheels`, downloaded with `pip download --no-deps` if absent."""
    wheels.mkdir(parents=True, exist_ok=True)
    wheel = _find_wheel(wheels, prefix)
    if wheel is None:
        extra = _PIP_PLATFORM if requirement.startswith("mediapipe") else []
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                        requirement, *extra], check=True)
        wheel = _find_wheel(wheels, prefix)
    if wheel is None:
        raise FileNotFoundError(f"wheels: expected a {prefix}*.whl after pip download, got none in {wheels}")
    return wheel


def prepare_models(out: str | Path, wheels: str | Path, names: tuple[str, ...] = tuple(MODEL_FILES)) -> dict[str, Path]:
    """Extract the model files `names` into `out` (kept when already there) and write the classes
    files `CLASS_FILES` there; file name -> path."""
    out, wheels = Path(out), Path(wheels)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in names:
        if name not in MODEL_FILES:
            raise ValueError(f"names: expected among {sorted(MODEL_FILES)}, got {name!r}")
        path = out / name
        if not path.is_file():
            requirement, prefix, member = MODEL_FILES[name]
            with zipfile.ZipFile(fetch_wheel(requirement, prefix, wheels)) as z:
                path.write_bytes(z.read(member))
        paths[name] = path
    for name, text in CLASS_FILES.items():
        (out / name).write_text(text)
        paths[name] = out / name
    return paths
