#!/usr/bin/env bash
# Install kitctl (editable) with the CPU PyTorch, CPU TensorFlow and CPU JAX the trials run on in tests.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check torch==2.13.0 numpy
python3 -m pip install -q --disable-pip-version-check tensorflow-cpu==2.21.0
# The versions of images/jax/requirements-cpu.in (jax 0.10.2: the last release for Python 3.11).
python3 -m pip install -q --disable-pip-version-check jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 optax==0.2.8
python3 -m pip install -q --disable-pip-version-check -e '.[test,ray]'
