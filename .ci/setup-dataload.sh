#!/usr/bin/env bash
# The data-loading trial's packages for the tests: scikit-image (the corpus's photographs), webdataset,
# DALI's CPU path, and ffcv 1.0.2 built from its sdist (pinned by hash) against Debian's OpenCV and libturbojpeg.
set -euo pipefail
cd "$(dirname "$0")/.."
FFCV_SDIST_SHA256=42766a487c8a659b543d070f24732c4b65aab8d96980f5792c63e91e55511f00
if ! pkg-config --exists opencv4 libturbojpeg 2>/dev/null; then
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends libopencv-dev libturbojpeg0-dev pkg-config >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -r trials/dataload/requirements.txt
if ! python3 -c "import ffcv._libffcv" 2>/dev/null; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: --no-build-isolation \
    -d "$tmp" ffcv==1.0.2
  echo "${FFCV_SDIST_SHA256}  $tmp/ffcv-1.0.2.tar.gz" | sha256sum -c --quiet -
  python3 -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation "$tmp/ffcv-1.0.2.tar.gz"
  rm -rf "$tmp"
fi
# DALI for the local dali-cpu loader tests: loader-dali's CPU pins (hash-checked), without DALI's GPU codecs
# (its metadata asks for nvimgcodec[all] and nvCOMP, ~590 MB) and without numpy/pillow (the host's own).
dali=$(mktemp)
grep -E '^(nvidia-dali-cuda130|nvidia-nvimgcodec-cu13|astunparse|gast|optree|nvtx|makefun|libcst)==' \
  images/loader-dali/requirements-cpu.txt > "$dali"
python3 -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r "$dali"
rm -f "$dali"
python3 -c "import ffcv._libffcv, webdataset, skimage, nvidia.dali"
