#!/usr/bin/env bash
# The wheels kitctl needs on the lent GPU machine beyond what its python3 (3.12, /opt/torch/.venv)
# already holds, into .whl/ (git-ignored; name it in the device call's `carry`):
#   docker (the SDK of the Docker runtime), jsonschema and its jsonschema-specifications,
#   referencing and compiled rpds-py. requests, urllib3, idna, certifi, charset-normalizer,
#   attrs and typing-extensions are on that machine already (its package list).
# tools/device-kitctl.sh and tools/device-docker-setup.sh install them into /tmp/site there.
#   tools/device-wheels.sh [DEST]      (default .whl; needs PyPI, i.e. run it here)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.whl}
pins=(docker==7.1.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1)
mkdir -p "$dest"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dest" "${pins[@]}"
# One version of each: two of the same distribution stop the install there.
dups=$(find "$dest" -maxdepth 1 -name '*.whl' -printf '%f\n' | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d)
[[ -z $dups ]] || { echo "device-wheels: more than one wheel of: $dups (clean $dest)" >&2; exit 1; }
ls -1 "$dest"
echo "device-wheels: $(du -sh "$dest" | cut -f1) in $dest"
