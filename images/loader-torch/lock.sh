#!/usr/bin/env bash
# Regenerate loader-torch's hashed CUDA lock with uv (pip install uv), as images/pytorch/lock.sh does.
# uv reads the hashes from the index (pypi.org): the multi-GB CUDA wheels are never downloaded.
#   requirements-cuda.lock  Python 3.12 (Ubuntu 24.04 in the CUDA base image), manylinux_2_28
# requirements-cpu.txt (the CI build, torch +cpu from wheels/) is kept by hand: it is the CPU lock of
# images/pytorch plus the loaders' packages.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export UV_PYTHON_DOWNLOADS=never
uv pip compile -q requirements-cuda.in --generate-hashes --no-config \
  --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
  --custom-compile-command ./lock.sh -o requirements-cuda.lock
# The host-userland build's additions (no dependencies followed: the base venv holds numpy), at the CUDA lock's pins.
uv pip compile -q requirements-host-userland.in --generate-hashes --no-config --no-deps \
  -c requirements-cuda.lock --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
  --custom-compile-command ./lock.sh -o requirements-host-userland.txt
