#!/usr/bin/env bash
# The test command: creates .venv if needed, installs optional system data used by some tests
# (Debian chromium for browser tests, mricron-data for the real MRI set) when run as root, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  need=()
  [ -x /usr/bin/chromium ] || need+=(chromium)
  [ -f /usr/share/mricron/templates/ch2.nii.gz ] || need+=(mricron-data)
  if [ ${#need[@]} -gt 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null) \
      || echo "warning: could not install ${need[*]}; the tests that need them will be skipped"
  fi
fi
exec .venv/bin/python -m pytest "$@"
