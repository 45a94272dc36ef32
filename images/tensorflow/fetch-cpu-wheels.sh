#!/usr/bin/env bash
# Put every wheel of requirements-cpu.lock (tensorflow-cpu 2.21.0 and its dependencies) into
# images/tensorflow/wheels/ (git-ignored), hash-checked against the lock. The CPU build then
# installs with no index at all (build arg PIP_NO_INDEX=1, compose.yaml's cpu-ci variant):
# a hermetic CI build, whatever the network or TLS interception of the build host.
# Wheels already there are checked and kept (pip download skips a file whose hash matches).
set -euo pipefail
# An image folder as $1 (images/jax uses this script for its own lock); default: this one.
HERE="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")}" && pwd)"
WHEELS="$HERE/wheels"
LOCK="$HERE/requirements-cpu.lock"
# Debian bookworm's python3 (the CI base image) is 3.11, its glibc 2.36. pip download takes
# --platform tags literally, so every manylinux tag the lock's wheels use is named.
PLATFORM=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311
          --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

mkdir -p "$WHEELS"
python3 -m pip download -q --no-deps --require-hashes "${PLATFORM[@]}" -r "$LOCK" -d "$WHEELS"
echo "fetch-cpu-wheels: $(ls "$WHEELS"/*.whl | wc -l) wheels in $WHEELS match $(basename "$LOCK")"
