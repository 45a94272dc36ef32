#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (as root) for kitctl's tests: the kit, the CPU PyTorch
# the trials run on here, the C++ toolchain for the OpenNN trial's core tests, a running Docker
# daemon and the local CI base image.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup-python.sh
bash .ci/setup-dataload.sh
bash .ci/setup-cxx.sh
bash .ci/docker-up.sh
