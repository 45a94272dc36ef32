#!/usr/bin/env bash
# Put every wheel of requirements-cpu.lock (jax/jaxlib 0.10.2 CPU, flax, optax and their
# dependencies, ~170 MB) into images/jax/wheels/ (git-ignored), hash-checked against the lock. The CPU build then
# installs with no index at all (build arg PIP_NO_INDEX=1, compose.yaml's cpu-ci variant):
# a hermetic CI build, whatever the network or TLS interception of the build host.
# Wheels already there are checked and kept (pip download skips a file whose hash matches).
set -euo pipefail
# Same platform tags and checks as the tensorflow image's: that script does it for this folder.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../tensorflow/fetch-cpu-wheels.sh" "$here"
