#!/usr/bin/env bash
# Run kitctl on a GPU machine where nothing can be installed from a registry (the project's
# lent H200): install the wheels carried in .whl/ into /tmp/site (jsonschema and its
# compiled rpds-py), put host/ on PYTHONPATH and run the CLI with that machine's python3.
#   tools/device-kitctl.sh run maxbatch --runtime local --engines pytorch-eager ...
set -u
cd "$(dirname "$0")/.." || exit 2
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/host${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec python3 -c 'from kitctl.cli import main; main()' "$@"
