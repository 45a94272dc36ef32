#!/usr/bin/env bash
# Regenerate loader-dali's hashed CUDA lock with uv (pip install uv), as images/pytorch/lock.sh does.
# uv reads the hashes from the index, pypi.org (where nvidia-dali-cuda130 is published): no wheel is downloaded.
#   requirements-cuda.lock  Python 3.12 (Ubuntu 24.04 in the CUDA base image), manylinux_2_28
# requirements-cpu.txt (the CI build, dali-cpu only, no GPU codecs) is kept by hand.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export UV_PYTHON_DOWNLOADS=never
uv pip compile -q requirements-cuda.in --generate-hashes --no-config \
  --index-url https://pypi.org/simple \
  --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
  --custom-compile-command ./lock.sh -o requirements-cuda.lock
