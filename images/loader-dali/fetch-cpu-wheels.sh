#!/usr/bin/env bash
# Fill images/loader-dali/wheels/ (git-ignored) with requirements-cpu.txt's wheels for Debian bookworm's python3.11
# (the CI base), hash-checked; the build then needs no index. ~270 MB, DALI's own wheel 199 MB of it.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$HERE/wheels"
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.11 \
  --implementation cp --abi cp311 --platform manylinux_2_28_x86_64 --require-hashes \
  -r "$HERE/requirements-cpu.txt" -d "$HERE/wheels"
echo "fetch-cpu-wheels: $(ls "$HERE"/wheels/*.whl | wc -l) wheels in $HERE/wheels"
