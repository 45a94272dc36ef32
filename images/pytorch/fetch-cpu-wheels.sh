#!/usr/bin/env bash
# Put every wheel of requirements-cpu.lock (torch 2.13.0+cpu and its dependencies) into
# images/pytorch/wheels/ (git-ignored), hash-checked against the lock. The CPU build then
# installs with no index at all (build arg PIP_NO_INDEX=1, compose.yaml's cpu-ci variant):
# a hermetic CI build, whatever the network or TLS interception of the build host.
# pip finds torch+cpu through its configured find-links/indexes (on these hosts: local disk).
#   --torch-only   fetch only the torch wheel, unchecked (lock.sh, before the lock exists)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WHEELS="$HERE/wheels"
LOCK="$HERE/requirements-cpu.lock"
TORCH="2.13.0+cpu"
# Debian bookworm's python3 (the CI base image) is 3.11.
PLATFORM=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311
          --platform manylinux_2_28_x86_64)

mkdir -p "$WHEELS"
if [ "${1:-}" = "--torch-only" ]; then
  python3 -m pip download -q --no-deps "${PLATFORM[@]}" "torch==$TORCH" -d "$WHEELS"
  exit 0
fi
python3 -m pip download -q --no-deps --require-hashes "${PLATFORM[@]}" -r "$LOCK" -d "$WHEELS"
echo "fetch-cpu-wheels: $(ls "$WHEELS"/*.whl | wc -l) wheels in $WHEELS match $(basename "$LOCK")"
