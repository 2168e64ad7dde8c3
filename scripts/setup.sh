#!/usr/bin/env bash
# Creates .venv (if missing or stale) and installs blindspots with its test extras.
# torch/torchvision are pinned to the builds this machine's pip serves from local disk.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q "torch==2.14.1" "torchvision==0.29.1"
  .venv/bin/python -m pip install -q -e ".[dev]"
  rm -f .venv/.installed-*; touch "$stamp"
fi
