#!/usr/bin/env bash
# Run kitctl on a GPU machine where nothing can be installed from a registry (the project's
# lent H200): install the wheels carried in .whl/ into /tmp/site (jsonschema and its
# compiled rpds-py), put host/ on PYTHONPATH and run the CLI with that machine's python3.
#   tools/device-kitctl.sh run maxbatch --runtime local --engines pytorch-eager ...
#
# Which code ran: the copy that reaches the GPU machine has no .git, so the commit travels in
# .kit-commit (repo root; neither committed nor git-ignored, so the copy takes it along):
#   1. here, in the checkout, right before each device call:  tools/device-kitctl.sh --stamp
#      (writes the commit, the dirty flag and the code's hash; do not commit the file)
#   2. there:  tools/device-kitctl.sh run ...
# The artifact's kit.git_commit/git_dirty then come from it (kit.git_source "stamp"); if the
# code no longer hashes as stamped (a stale stamp), git_dirty is true. KITCTL_GIT_COMMIT and
# KITCTL_GIT_DIRTY, when set there, take its place. kit.code (the host package's hash) and each
# engine's provenance.code (its trial's) are recorded with or without any of these.
set -u
cd "$(dirname "$0")/.." || exit 2
if [[ ${1:-} == --stamp ]]; then
  PYTHONPATH="$PWD/host" exec python3 -m kitctl.core.provenance
fi
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/host${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec python3 -c 'from kitctl.cli import main; main()' "$@"
