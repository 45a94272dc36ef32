#!/usr/bin/env bash
# Compile-check the OpenNN-facing trial (src/opennn_trial.cpp, src/kit_cuda_graph_hooks.cpp) where OpenNN itself cannot be
# built (GCC < 13, no CUDA): clang 18 + libc++ from the `ziglang` wheel compiles the trial's
# translation unit against OpenNN's headers, Eigen's headers and CUDA/cuDNN headers from NVIDIA's
# PyPI wheels, once with OPENNN_HAS_CUDA (the GPU build) and once without (a CPU-only OpenNN),
# then lists the OpenNN symbols the object needs, each checked for a definition in OpenNN's
# sources. It also compiles kit_core and its tests with the same clang/libc++. Not part of CI.
#
#   trials/opennn/syntax-check.sh OPENNN_SRC EIGEN_SRC [CUDA_INCLUDE_DIR...]
#
# OPENNN_SRC  an OpenNN checkout (the commit the image builds); EIGEN_SRC  Eigen 5.0.1's tree.
# CUDA_INCLUDE_DIR...  directories with cuda_runtime.h, cublas_v2.h, cudnn.h, ... (e.g.
#   /usr/local/cuda/include and cuDNN's include). Without them, the headers are taken from the
#   wheels nvidia-cuda-runtime/-crt/-cccl and nvidia-cublas 13.0 and nvidia-cudnn-cu13 9.19,
#   downloaded once (about 800 MB, headers kept) into the cache below.
#
# Environment: KIT_SYNTAX_CACHE  where ziglang and the headers go (default ~/.cache/kit-opennn-syntax)
#
# Known difference handled here: OpenNN's operator.h uses std::span without including <span>
# (libstdc++ pulls it in through other headers, libc++ does not), so <span> is force-included.
set -euo pipefail

die() { printf 'syntax-check: %s\n' "$*" >&2; exit 1; }

[[ $# -ge 2 ]] || die "usage: $0 OPENNN_SRC EIGEN_SRC [CUDA_INCLUDE_DIR...]"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
opennn=$(cd "$1" && pwd) || die "no OpenNN tree at $1"
eigen=$(cd "$2" && pwd) || die "no Eigen tree at $2"
shift 2
[[ -f $opennn/opennn/standard_networks.h ]] || die "$opennn is not an OpenNN checkout"
[[ -f $eigen/Eigen/Core ]] || die "$eigen is not an Eigen tree"
cache=${KIT_SYNTAX_CACHE:-$HOME/.cache/kit-opennn-syntax}
mkdir -p "$cache"
command -v python3 >/dev/null || die "python3 is needed (for the ziglang wheel)"

# clang + libc++, from PyPI.
if ! PYTHONPATH=$cache/zig python3 -c 'import ziglang' 2>/dev/null; then
  echo "syntax-check: installing ziglang into $cache/zig" >&2
  python3 -m pip install -q --disable-pip-version-check --target "$cache/zig" ziglang
fi
zigcxx() { PYTHONPATH=$cache/zig python3 -m ziglang c++ "$@"; }

# CUDA and cuDNN headers.
cuda_includes=()
if [[ $# -gt 0 ]]; then
  for d in "$@"; do
    [[ -d $d ]] || die "no directory $d"
    cuda_includes+=(-isystem "$d")
  done
else
  headers=$cache/cuda-headers
  if [[ ! -f $headers/.complete ]]; then
    echo "syntax-check: fetching CUDA 13.0 / cuDNN 9.19 headers from PyPI wheels into $headers" >&2
    rm -rf "$headers" "$cache/wheels"
    python3 -m pip download -q --disable-pip-version-check --no-deps -d "$cache/wheels" \
      'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-crt==13.0.*' 'nvidia-cuda-cccl==13.0.*' \
      'nvidia-cublas==13.0.*' 'nvidia-cudnn-cu13==9.19.*'
    python3 - "$cache/wheels" "$headers" <<'EOF'
import pathlib, sys, zipfile
wheels, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for wheel in wheels.glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if "/include/" in name and not name.endswith("/"):
                z.extract(name, out)
EOF
    rm -rf "$cache/wheels"
    touch "$headers/.complete"
  fi
  cuda_includes=(-isystem "$headers/nvidia/cu13/include" -isystem "$headers/nvidia/cu13/include/cccl"
                 -isystem "$headers/nvidia/cudnn/include")
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/kit_build_info.h" <<'EOF'
#pragma once
#define KIT_OPENNN_COMMIT "syntax-check"
#define KIT_OPENNN_VERSION "syntax-check"
#define KIT_OPENNN_MARCH "x86-64-v3"
#define KIT_OPENNN_LTO "OFF"
#define KIT_CXX_COMPILER "syntax-check"
#define KIT_CUDA_COMPILER "syntax-check"
#define KIT_CUDA_ARCHITECTURES "90"
#define KIT_CUDNN_HEADER_VERSION "syntax-check"
EOF

common=(-std=c++20 -O0 -target x86_64-linux-gnu -Wall -Wextra
        -DEIGEN_USE_THREADS -DEIGEN_MAX_ALIGN_BYTES=64 -DEIGEN_NO_DEBUG
        -I"$work" -I"$here/core" -isystem "$opennn" -isystem "$eigen" -include span)

status=0
echo "== trial, OPENNN_HAS_CUDA (GPU build)"
if zigcxx "${common[@]}" -DOPENNN_HAS_CUDA "${cuda_includes[@]}" -c -o "$work/trial_cuda.o" "$here/src/opennn_trial.cpp" &&
   zigcxx "${common[@]}" -DOPENNN_HAS_CUDA "${cuda_includes[@]}" -c -o "$work/hooks_cuda.o" "$here/src/kit_cuda_graph_hooks.cpp"; then
  echo "ok"
else
  status=1
fi
echo "== trial, CPU-only OpenNN"
if zigcxx "${common[@]}" -c -o "$work/trial_cpu.o" "$here/src/opennn_trial.cpp"; then
  echo "ok"
else
  status=1
fi
echo "== kit_core and its tests (clang/libc++)"
for f in "$here"/core/*.cpp "$here"/tests/*.cpp; do
  zigcxx -std=c++20 -O0 -target x86_64-linux-gnu -Wall -Wextra -Wpedantic -I"$here/core" \
    -c -o "$work/$(basename "$f").o" "$f" || status=1
done
[[ $status -eq 0 ]] && echo "ok"

if [[ -f $work/trial_cuda.o ]] && command -v nm >/dev/null; then
  echo "== OpenNN symbols the trial needs (each should be defined in OpenNN's sources)"
  while IFS= read -r sym; do
      # "opennn::A::b(args)" -> "A::b" searched in the .cpp files; typeinfo/vtable -> "class A"
      key=${sym#typeinfo for }
      key=${key#vtable for }
      key=${key#opennn::}
      key=${key%%(*}
      if [[ $sym == typeinfo* || $sym == vtable* ]]; then   # the class is declared
        where=$(grep -lE "(class|struct) ${key##*::}\b" "$opennn"/opennn/*.h 2>/dev/null | head -1 || true)
      elif [[ $key =~ ^([A-Z][A-Za-z0-9_]*)::(~?[A-Za-z0-9_]+)$ ]]; then  # Class::member( defined
        where=$(grep -lF "${BASH_REMATCH[1]}::${BASH_REMATCH[2]}(" "$opennn"/opennn/*.cpp 2>/dev/null | head -1 || true)
      else  # a namespace function: a definition starts in column 0 (its own file first)
        files=("$opennn"/opennn/*.cpp)
        [[ $key == *::* && -f $opennn/opennn/${key%%::*}.cpp ]] && files=("$opennn/opennn/${key%%::*}.cpp" "${files[@]}")
        where=$(grep -lE "^[^ #/].*\b${key##*::}\(" "${files[@]}" 2>/dev/null | head -1 || true)
      fi
      loc="NOT FOUND"
      [[ -z $where ]] || loc=$(basename "$where")
      printf '  %-60s %s\n' "${sym:0:60}" "$loc"
      [[ -n $where ]] || status=1
  done < <(nm -C -u "$work/trial_cuda.o" | sed -n 's/^ *U //p' | grep '^opennn::\|for opennn::' | sort -u)
fi
exit $status
