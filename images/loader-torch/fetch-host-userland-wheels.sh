#!/usr/bin/env bash
# Put requirements-host-userland.txt's wheels (webdataset, braceexpand, pyyaml for Python 3.12; ~1 MB) into
# images/loader-torch/wheels/ (git-ignored), hash-checked. Run where an index is reachable; carry the folder to the
# GPU machine, where the host-userland build installs them with no index.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$HERE/wheels"
python3 -m pip download -q --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: \
  --python-version 3.12 --implementation cp --abi cp312 --platform manylinux_2_28_x86_64 \
  -r "$HERE/requirements-host-userland.txt" -d "$HERE/wheels"
echo "fetch-host-userland-wheels: $(ls "$HERE"/wheels/*.whl | wc -l) wheels in $HERE/wheels"
