#!/usr/bin/env bash
# Install kitctl (editable) with the CPU PyTorch and CPU TensorFlow the trials run on in tests.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check torch==2.13.0 numpy
python3 -m pip install -q --disable-pip-version-check tensorflow-cpu==2.21.0
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
