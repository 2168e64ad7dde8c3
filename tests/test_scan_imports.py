"""The scan and what its Ray workers import load without torch (a decode task or a driver that
scans with non-torch models should not pay torch's import, seconds per worker process)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _imports_torch(statement: str) -> bool:
    code = f"import sys; sys.path.insert(0, {SRC!r}); {statement}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip().splitlines()[-1] == "True"


def test_scan_package_and_engines_import_without_torch():
    assert not _imports_torch("import blindspots.scan, blindspots.scan.engines.forward, "
                              "blindspots.scan.engines.rows, blindspots.scan.engines.pipeline")


def test_ray_engine_module_imports_without_torch():
    # what a Ray decode task unpickles: the engine module and the pool (ray itself not needed here)
    assert not _imports_torch("import blindspots.scan.engines.ray, blindspots.data.sources")
