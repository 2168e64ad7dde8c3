"""Run a `blindspots` command in a fresh process and tell which heavy packages it imported."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def imports_torch(*args: str | Path, cwd: str | Path | None = None) -> bool:
    """Run `blindspots ARGS` in a fresh Python (it must succeed); True when the command imported torch."""
    code = ("import sys\nfrom blindspots.cli import app\n"
            f"try:\n    app({[str(a) for a in args]!r})\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('torch' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip().splitlines()[-1] == "True"
