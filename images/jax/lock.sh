#!/usr/bin/env bash
# Regenerate the hashed lock files of the JAX image with uv (pip install uv).
# uv reads the hashes from the index: the large CUDA wheels are never downloaded.
#   requirements-cuda.lock  Python 3.12 (Ubuntu 24.04 in the CUDA base image), manylinux_2_28
#   requirements-cpu.lock   Python 3.11 (Debian bookworm CI base), jax CPU
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export UV_PYTHON_DOWNLOADS=never
uv pip compile -q requirements-cuda.in --generate-hashes --no-config \
  --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
  --custom-compile-command ./lock.sh -o requirements-cuda.lock
uv pip compile -q requirements-cpu.in --generate-hashes --no-config \
  --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
  --custom-compile-command ./lock.sh -o requirements-cpu.lock
./fetch-cpu-wheels.sh
