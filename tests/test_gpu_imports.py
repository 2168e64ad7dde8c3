"""The GPU benchmark's machine has only torch, torchvision, transformers, onnxruntime, pyarrow, pandas,
numba, typer and Pillow (`pip install --no-deps -e .`): the scan, the model loader and
benchmarks/gpu_scan.py import with every other dependency missing (imports of optional packages lazy)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: core or optional dependencies a bare GPU image lacks (each made unimportable in the child process)
MISSING = ("scipy", "sklearn", "duckdb", "matplotlib", "fastapi", "starlette", "jinja2", "nibabel", "threadpoolctl",
           "skimage", "segmentation_models_pytorch", "onnx", "onnxscript", "imageio", "imageio_ffmpeg", "ray",
           "uvicorn", "httptools", "multipart", "python_multipart", "swagger_ui_bundle", "uvloop", "hypothesis")

CODE = f"""
import runpy, sys
sys.path.insert(0, {str(ROOT / 'src')!r})
for name in {MISSING!r}:
    sys.modules[name] = None  # how a package that is not installed looks to import and importlib.util.find_spec
import blindspots.scan, blindspots.scan.engines.local, blindspots.models.load, blindspots.models.adapters.hf
from blindspots.models import load_model
from transformers import SegformerConfig, SegformerForSemanticSegmentation
bench = runpy.run_path({str(ROOT / 'benchmarks' / 'gpu_scan.py')!r}, run_name="gpu_scan")
assert callable(bench["main"])
print("imported", sorted(n for n in {MISSING!r} if sys.modules.get(n) is not None))
"""


def test_scan_and_gpu_benchmark_import_with_only_the_gpu_image_packages():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "imported []"
