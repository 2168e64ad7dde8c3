#!/usr/bin/env bash
# The main job: creates .venv if needed, then runs the blindspots demo on built-in procedural scenes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/blindspots demo --out "${1:-runs/demo}"
