#!/usr/bin/env bash
# The C++ toolchain for the OpenNN trial's kit_core unit tests (tests/test_trial_opennn_core.py):
# Debian 12's cmake, g++ 12 and make. OpenNN itself needs GCC 13 + CUDA and is built on the GPU
# machine or in its image, never here.
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=()
for t in cmake:cmake g++:g++ make:make; do
  command -v "${t%%:*}" >/dev/null 2>&1 || need+=("${t##*:}")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "setup-cxx: installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "setup-cxx: $(cmake --version | head -n1), $(g++ --version | head -n1)"
