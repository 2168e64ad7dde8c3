#!/usr/bin/env bash
# Creates .venv (if missing or stale) and installs blindspots with its test extras ([dev]: every extra but
# FiftyOne, the docs tools, the test tools), at the exact versions of constraints.txt (torch 2.14.1 and
# torchvision 0.29.1 among them); pyproject.toml itself holds only version ranges.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
stamp=.venv/.installed-$(cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]"
  rm -f .venv/.installed-*; touch "$stamp"
fi
