#!/usr/bin/env bash
# Fill images/loader-ffcv/wheels/ (git-ignored) for Debian bookworm's python3.11 (the CI base): ffcv built here
# from its sdist (tools/build-ffcv-wheel.sh: hash-checked, Debian's OpenCV/libturbojpeg bundled by auditwheel,
# plus syslibs/ for the X11 client libraries Debian's OpenCV links), the rest downloaded; the build needs no index.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
W="$HERE/wheels"
mkdir -p "$W"
if ! compgen -G "$W/ffcv-1.0.2-cp311-*.whl" >/dev/null; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  PY="${PY:-$(command -v python3.11 || command -v python3)}" bash "$ROOT/tools/build-ffcv-wheel.sh" "$tmp/out" >/dev/null
  cp "$tmp"/out/*.whl "$W/"
  rm -rf "$W/syslibs"; cp -r "$tmp/out/syslibs" "$W/syslibs"
fi
grep -vE '^(#|ffcv|assertpy|terminaltables|tqdm|psutil)' "$HERE/requirements-cpu.txt" | grep . > "$W/.pypi.txt"
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.11 \
  --implementation cp --abi cp311 --platform manylinux_2_28_x86_64 -r "$W/.pypi.txt" -d "$W"
echo "fetch-cpu-wheels: $(ls "$W"/*.whl | wc -l) wheels in $W"
