"""Thin alias kept for old links: `examples/defuse.py --data mnist` (same arguments).

    .venv/bin/python examples/defuse_mnist.py --out runs/defuse_mnist
"""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.argv = [str(Path(__file__).with_name("defuse.py")), "--data", "mnist", *sys.argv[1:]]
    runpy.run_path(sys.argv[0], run_name="__main__")
