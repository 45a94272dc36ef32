#!/usr/bin/env bash
# Build libjpeg-turbo, OpenNN and the kit's OpenNN trial into PREFIX, offline.
#
#   images/opennn/build.sh SRC_DIR PREFIX
#
# SRC_DIR holds the checked-out sources, named exactly: opennn/ cudnn-frontend/ eigen/ zlib/
# libjpeg-turbo/ (images/opennn/fetch-sources.sh or tools/opennn-sources-here.sh make it).
# The trial's CMake project is found at $(dirname build.sh)/../../trials/opennn.
# Results:
#   PREFIX/bin/kit-opennn-trial            RPATH $ORIGIN/../lib, then the CUDA toolkit's lib dir
#   PREFIX/lib/                            the shared libraries bundled (see BUNDLE_LIBS)
#   PREFIX/share/kit-opennn/build-info.json  commits, compilers, nvcc, cuDNN, archs, stage times
#
# OpenNN's CMake is used as is, with its downloads redirected to SRC_DIR:
# FETCHCONTENT_SOURCE_DIR_{CUDNN_FRONTEND,EIGEN,OPENNN_ZLIB} + FETCHCONTENT_FULLY_DISCONNECTED, and
# libjpeg-turbo (an ExternalProject with a fixed URL there) built here first and handed over as
# JPEG_INCLUDE_DIR/JPEG_LIBRARY. OpenNN's tests, examples, benchmarks and install rules are off;
# its -march=native is replaced (OPENNN_MARCH). Release build.
#
# Environment (all optional):
#   CUDA_ARCHS     compute capabilities (default 80;86;89;90; never native/all)
#   JOBS           parallel jobs (default: nproc)
#   CC, CXX        host compilers (default: cc/c++; CXX must compile C++20 <format>: GCC >= 13)
#   CUDACXX        nvcc (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   BUILD_DIR      build tree, reused by later runs (default PREFIX/.build)
#   CUDNN_ROOT     cuDNN with include/ and lib/ (or lib64/) when it is not in the system paths
#                  (e.g. the nvidia-cudnn-cu13 wheel's nvidia/cudnn folder)
#   CUDA_EXTRA_LIB_DIRS  colon-separated dirs with CUDA libraries the toolkit's lib dir lacks
#                  (e.g. site-packages/nvidia/cu13/lib); unversioned links are made for CMake
#   OPENNN_COMMIT  recorded commit (default: git -C SRC_DIR/opennn rev-parse HEAD, else the file
#                  SRC_DIR/opennn/.kit-commit, else the build fails)
#   OPENNN_MARCH   replaces OpenNN's -march=native (default x86-64-v3; empty: no -march)
#   OPENNN_LTO     OpenNN_ENABLE_LTO, OpenNN's link-time optimisation (default ON, as OpenNN)
#   OPENNN_DISABLE_CUDA=1  a CPU-only build (no nvcc, no cuDNN)
#   BUNDLE_LIBS    auto (default): copy into PREFIX/lib every library the trial needs that lies
#                  outside the system library dirs and outside the CUDA toolkit (e.g. GCC's
#                  libstdc++/libgomp from /opt/gcc, cuDNN from CUDNN_ROOT);
#                  all: the CUDA toolkit's libraries too (a self-contained PREFIX); none
# The driver's libraries (libcuda, libnvidia-*) are never copied.
set -euo pipefail

log() { printf 'build.sh: %s\n' "$*" >&2; }
die() { printf 'build.sh: error: %s\n' "$*" >&2; exit 1; }

[[ $# -eq 2 && -n $1 && -n $2 ]] || die "usage: $0 SRC_DIR PREFIX"
[[ -d $1 ]] || die "SRC_DIR '$1' is not a directory"
src=$(cd "$1" && pwd)
mkdir -p "$2" || die "cannot create PREFIX '$2'"
prefix=$(cd "$2" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
trial_src=$(cd "$here/../../trials/opennn" 2>/dev/null && pwd) ||
  die "the trial's sources are not at $here/../../trials/opennn"
[[ -f $trial_src/CMakeLists.txt && -f $trial_src/src/opennn_trial.cpp ]] ||
  die "$trial_src is not the trial's CMake project"

# ------------------------------------------------------------------------------- sources
need_file() { # name relative-file
  [[ -d $src/$1 ]] || die "missing source tree $src/$1 (SRC_DIR needs opennn/ cudnn-frontend/ eigen/ zlib/ libjpeg-turbo/)"
  [[ -f $src/$1/$2 ]] || die "$src/$1 does not look like $1: no $2"
}
need_file opennn opennn/standard_networks.h
need_file opennn CMakeLists.txt
need_file cudnn-frontend include/cudnn_frontend.h
need_file eigen Eigen/Core
need_file zlib zlib.h
need_file libjpeg-turbo CMakeLists.txt
[[ -f $src/libjpeg-turbo/src/jpeglib.h || -f $src/libjpeg-turbo/jpeglib.h ]] ||
  die "$src/libjpeg-turbo does not look like libjpeg-turbo: no jpeglib.h"

commit_of() { # tree -> commit or "unknown"
  local dir=$src/$1
  # Only the tree's own repository counts, not one it happens to sit in.
  if git -C "$dir" rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
     [[ $(git -C "$dir" rev-parse --show-toplevel 2>/dev/null) == "$(cd "$dir" && pwd -P)" ]]; then
    git -C "$dir" rev-parse HEAD
  elif [[ -s $dir/.kit-commit ]]; then
    tr -d '[:space:]' <"$dir/.kit-commit"
  else
    echo unknown
  fi
}
opennn_commit=${OPENNN_COMMIT:-$(commit_of opennn)}
[[ $opennn_commit != unknown && -n $opennn_commit ]] ||
  die "cannot tell the OpenNN commit: $src/opennn is no git checkout and has no .kit-commit; set OPENNN_COMMIT"

# --------------------------------------------------------------------------------- tools
version_ge() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1) == "$2" ]]; }
command -v cmake >/dev/null || die "cmake is not installed (>= 3.25.2 for a CUDA build)"
cmake_version=$(cmake --version | sed -n 's/^cmake version \([0-9][0-9.]*\).*/\1/p')
if command -v ninja >/dev/null; then
  generator=(-G Ninja)
elif command -v make >/dev/null; then
  generator=(-G "Unix Makefiles")
else
  die "neither ninja nor make is installed"
fi

cxx=${CXX:-c++}
command -v "$cxx" >/dev/null || die "C++ compiler '$cxx' not found (set CXX)"
cxx=$(command -v "$cxx")
if [[ -n ${CC:-} ]]; then
  cc=$CC
else
  case $cxx in
    *clang++*) cc=${cxx/clang++/clang} ;;
    *g++*) cc=${cxx%g++*}gcc${cxx##*g++} ;;
    *) cc=cc ;;
  esac
fi
command -v "$cc" >/dev/null || die "C compiler '$cc' not found (set CC; zlib and libjpeg-turbo are C)"
cc=$(command -v "$cc")

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <format>\nint main() { return std::format("{}", 42).size() == 2 ? 0 : 1; }\n' >"$probe/f.cpp"
"$cxx" -std=c++20 "$probe/f.cpp" -o "$probe/f" 2>"$probe/f.log" ||
  die "$cxx cannot compile C++20 <format> ($("$cxx" --version | head -n1)); OpenNN needs it: use GCC >= 13 (set CXX)"

cuda_on=1
[[ ${OPENNN_DISABLE_CUDA:-0} == 1 ]] && cuda_on=0
# OpenNN's CUDA sources are C++20: CMake knows nvcc's -std=c++20 from 3.25.2 on (and
# cudnn-frontend asks for 3.23); a CPU-only build needs OpenNN's 3.18.
if ((cuda_on)); then
  version_ge "$cmake_version" 3.25.2 || die "cmake $cmake_version is too old for OpenNN's CUDA C++20 sources: need >= 3.25.2"
else
  version_ge "$cmake_version" 3.18 || die "cmake $cmake_version is too old: OpenNN needs >= 3.18"
fi
nvcc="" toolkit_libdir="" cuda_archs=${CUDA_ARCHS:-80;86;89;90}
if ((cuda_on)); then
  if [[ -n ${CUDACXX:-} ]]; then
    nvcc=$CUDACXX
  elif command -v nvcc >/dev/null; then
    nvcc=$(command -v nvcc)
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then
    nvcc=/usr/local/cuda/bin/nvcc
  fi
  [[ -n $nvcc && -x $nvcc ]] || die "nvcc not found: set CUDACXX (or OPENNN_DISABLE_CUDA=1 for a CPU-only build)"
  case ";$cuda_archs;" in
    *native* | *";all;"* | *all-major*) die "CUDA_ARCHS='$cuda_archs': name compute capabilities (e.g. 80;86;89;90), never native/all" ;;
  esac
  [[ $cuda_archs =~ ^[0-9]+[a-z]?(-real|-virtual)?(\;[0-9]+[a-z]?(-real|-virtual)?)*$ ]] ||
    die "CUDA_ARCHS='$cuda_archs': give compute capabilities like 80;86;89;90"
  toolkit=$(cd "$(dirname "$nvcc")/.." && pwd -P)
  for d in "$toolkit/lib64" "$toolkit/targets/x86_64-linux/lib" "$toolkit/lib"; do
    if [[ -e $d/libcudart.so || -e $d/libcudart.so.13 || -e $d/libcudart.so.12 ]]; then
      toolkit_libdir=$(cd "$d" && pwd -P)
      break
    fi
  done
  [[ -n $toolkit_libdir ]] || die "no libcudart.so in the CUDA toolkit at $toolkit"
fi

jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "JOBS='$jobs' is not a positive number"
build=${BUILD_DIR:-$prefix/.build}
mkdir -p "$build"
build=$(cd "$build" && pwd)
march=${OPENNN_MARCH-x86-64-v3}
lto=${OPENNN_LTO:-ON}
bundle=${BUNDLE_LIBS:-auto}
case $bundle in auto | all | none) ;; *) die "BUNDLE_LIBS='$bundle': auto, all or none" ;; esac

# cuDNN: CUDNN_ROOT, or where OpenNN's CMake looks (the toolkit's include dir, /usr/include).
cudnn_args=() cudnn_header=""
if ((cuda_on)); then
  if [[ -n ${CUDNN_ROOT:-} ]]; then
    [[ -d $CUDNN_ROOT ]] || die "CUDNN_ROOT='$CUDNN_ROOT' is not a directory"
    root=$(cd "$CUDNN_ROOT" && pwd)
    [[ -f $root/include/cudnn.h ]] || die "CUDNN_ROOT=$root has no include/cudnn.h"
    lib=""
    for d in "$root/lib" "$root/lib64"; do
      for f in "$d/libcudnn.so" "$d"/libcudnn.so.[0-9]; do
        [[ -e $f ]] && { lib=$f; break 2; }
      done
    done
    [[ -n $lib ]] || die "CUDNN_ROOT=$root has no lib/libcudnn.so*"
    cudnn_args=(-DCUDNN_INCLUDE_DIR="$root/include" -DCUDNN_LIBRARY="$lib")
    cudnn_header=$root/include/cudnn_version.h
  else
    # Where OpenNN's find_path looks (cudnn_version.h or cudnn.h); Debian/Ubuntu packages put
    # cudnn_version_v9.h in the multiarch dir and link the plain names into /usr/include.
    for f in "$toolkit/include/cudnn_version.h" /usr/include/cudnn_version.h /usr/local/cuda/include/cudnn_version.h \
             /usr/include/x86_64-linux-gnu/cudnn_version_v9.h "$toolkit/include/cudnn.h" /usr/include/cudnn.h; do
      [[ -f $f ]] && { cudnn_header=$f; break; }
    done
    [[ -n $cudnn_header ]] || die "cuDNN headers not found in the system paths: set CUDNN_ROOT (a dir with include/ and lib/)"
  fi
fi
cudnn_version=unknown
if [[ -f $cudnn_header ]]; then
  cudnn_version=$(awk '$1 == "#define" && $2 ~ /^CUDNN_(MAJOR|MINOR|PATCHLEVEL)$/ { v[$2] = $3 }
                       END { print v["CUDNN_MAJOR"] "." v["CUDNN_MINOR"] "." v["CUDNN_PATCHLEVEL"] }' "$cudnn_header")
  [[ $cudnn_version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || cudnn_version=unknown
fi

# Extra CUDA library dirs: a folder of links with the unversioned names CMake's find_library
# wants (wheels ship only libX.so.N) and the versioned ones the binary asks for.
linkfarm_args=()
if ((cuda_on)) && [[ -n ${CUDA_EXTRA_LIB_DIRS:-} ]]; then
  farm=$build/cuda-lib-links
  rm -rf "$farm"
  mkdir -p "$farm"
  IFS=: read -r -a extra_dirs <<<"$CUDA_EXTRA_LIB_DIRS"
  for d in "${extra_dirs[@]}"; do
    [[ -d $d ]] || die "CUDA_EXTRA_LIB_DIRS: '$d' is not a directory"
    for f in "$d"/lib*.so*; do
      [[ -e $f ]] || continue
      name=$(basename "$f")
      [[ -e $farm/$name ]] || ln -s "$(cd "$(dirname "$f")" && pwd)/$name" "$farm/$name"
      base=${name%%.so*}.so
      [[ -e $farm/$base ]] || ln -s "$(cd "$(dirname "$f")" && pwd)/$name" "$farm/$base"
    done
  done
  linkfarm_args=(-DCMAKE_LIBRARY_PATH="$farm")
fi
if ((cuda_on)); then
  for l in cudart cublas cublasLt nvrtc; do
    found=""
    for d in "$toolkit_libdir" ${farm:+"$farm"}; do
      [[ -e $d/lib$l.so ]] && found=1
    done
    [[ -n $found ]] || die "lib$l.so is in neither the CUDA toolkit ($toolkit_libdir) nor CUDA_EXTRA_LIB_DIRS; set CUDA_EXTRA_LIB_DIRS (e.g. site-packages/nvidia/cu13/lib)"
  done
fi

if ((cuda_on)); then
  log "OpenNN $opennn_commit  CXX $cxx  CC $cc  nvcc $nvcc  archs $cuda_archs  cuDNN $cudnn_version"
else
  log "OpenNN $opennn_commit  CXX $cxx  CC $cc  CPU only (OPENNN_DISABLE_CUDA=1)"
fi
log "BUILD_DIR $build  PREFIX $prefix  jobs $jobs  march '${march}'  LTO $lto  bundle $bundle"

# --------------------------------------------------------------------------------- stages
declare -A seconds=()
stage_order=()
now() { date +%s.%N; }
run_stage() { # name command...
  local name=$1 t0 t1
  shift
  log "---- $name"
  t0=$(now)
  "$@"
  t1=$(now)
  seconds[$name]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  stage_order+=("$name")
  log "---- $name: ${seconds[$name]} s"
}

jpeg_prefix=$build/libjpeg-turbo
jpeg_lib=$jpeg_prefix/lib/libjpeg.a
stage_libjpeg() {
  local stamp_want stamp_have=""
  stamp_want="$(commit_of libjpeg-turbo) $cc $("$cc" -dumpversion)"
  [[ -f $jpeg_prefix/.kit-stamp ]] && stamp_have=$(cat "$jpeg_prefix/.kit-stamp")
  if [[ -f $jpeg_lib && $stamp_have == "$stamp_want" ]]; then
    log "libjpeg-turbo is up to date in $jpeg_prefix"
    return
  fi
  # The options OpenNN's own ExternalProject uses (static, no SIMD/nasm, no TurboJPEG/Java),
  # no tools or tests, position-independent code for a PIE executable.
  cmake -S "$src/libjpeg-turbo" -B "$build/libjpeg-turbo-build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_INSTALL_PREFIX="$jpeg_prefix" -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_INSTALL_INCLUDEDIR=include \
    -DENABLE_SHARED=OFF -DENABLE_STATIC=ON -DWITH_SIMD=OFF -DWITH_TURBOJPEG=OFF -DWITH_JAVA=OFF \
    -DWITH_TOOLS=OFF -DWITH_TESTS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON
  cmake --build "$build/libjpeg-turbo-build" --parallel "$jobs"
  cmake --install "$build/libjpeg-turbo-build" --component include
  cmake --install "$build/libjpeg-turbo-build" --component lib
  [[ -f $jpeg_lib ]] || die "libjpeg-turbo installed no $jpeg_lib"
  printf '%s' "$stamp_want" >"$jpeg_prefix/.kit-stamp"
}

trial_build=$build/trial
stage_configure() {
  # zlib's CMake (1.3.1) renames zconf.h in its source folder: it works on a copy.
  local zlib_copy=$build/src/zlib stamp
  stamp="$(commit_of zlib) $src/zlib"
  if [[ ! -f $zlib_copy/.kit-stamp || $(cat "$zlib_copy/.kit-stamp") != "$stamp" ]]; then
    rm -rf "$zlib_copy"
    mkdir -p "$build/src"
    cp -a "$src/zlib" "$zlib_copy"
    printf '%s' "$stamp" >"$zlib_copy/.kit-stamp"
  fi
  local cuda_args=()
  if ((cuda_on)); then
    cuda_args=(-DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_HOST_COMPILER="$cxx"
               -DCMAKE_CUDA_ARCHITECTURES="$cuda_archs" -DKIT_EXTRA_RPATH="$toolkit_libdir"
               "${cudnn_args[@]}" "${linkfarm_args[@]}")
  else
    cuda_args=(-DOpenNN_DISABLE_CUDA=ON)
  fi
  cmake -S "$trial_src" -B "$trial_build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
    -DKIT_WITH_OPENNN=ON -DKIT_BUILD_TESTS=OFF \
    -DKIT_OPENNN_SOURCE_DIR="$src/opennn" -DKIT_OPENNN_COMMIT="$opennn_commit" \
    -DKIT_OPENNN_MARCH="$march" -DOpenNN_ENABLE_LTO="$lto" \
    -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
    -DFETCHCONTENT_SOURCE_DIR_CUDNN_FRONTEND="$src/cudnn-frontend" \
    -DFETCHCONTENT_SOURCE_DIR_EIGEN="$src/eigen" \
    -DFETCHCONTENT_SOURCE_DIR_OPENNN_ZLIB="$zlib_copy" \
    -DCMAKE_DISABLE_FIND_PACKAGE_Eigen3=ON -DCMAKE_DISABLE_FIND_PACKAGE_ZLIB=ON \
    -DZLIB_BUILD_EXAMPLES=OFF -DZLIB_BUILD_TESTING=OFF \
    -DJPEG_INCLUDE_DIR="$jpeg_prefix/include" -DJPEG_LIBRARY="$jpeg_lib" \
    "${cuda_args[@]}"
}

stage_opennn() { cmake --build "$trial_build" --target opennn --parallel "$jobs"; }
stage_trial() { cmake --build "$trial_build" --target kit-opennn-trial --parallel "$jobs"; }

bundled=()
is_system_lib() {
  case $1 in
    /lib/* | /lib64/* | /usr/lib/* | /usr/lib64/*) return 0 ;;
  esac
  return 1
}
copy_lib() { # path-as-resolved name
  local from=$1 name=$2 b
  for b in "${bundled[@]}"; do [[ $b == "$name" ]] && return; done
  rm -f "$prefix/lib/$name"
  cp -L "$from" "$prefix/lib/$name"
  chmod 0755 "$prefix/lib/$name"
  bundled+=("$name")
}
copy_siblings() { # dir glob: what a library dlopen()s by name next to itself
  local f
  for f in "$1"/$2; do
    [[ -e $f ]] || continue
    [[ $(basename "$f") =~ \.so\.[0-9]+(\.[0-9]+)?$ ]] || continue
    copy_lib "$f" "$(basename "$f")"
  done
}
stage_install() {
  cmake --install "$trial_build" --component kit --prefix "$prefix"
  local bin=$prefix/bin/kit-opennn-trial
  [[ -x $bin ]] || die "the install produced no $bin"
  mkdir -p "$prefix/lib" "$prefix/share/kit-opennn"
  # What an earlier run bundled goes first (it may be another version or another BUNDLE_LIBS).
  local manifest=$prefix/share/kit-opennn/bundled-libs.txt old
  if [[ -f $manifest ]]; then
    while IFS= read -r old; do
      [[ -n $old && $old != */* ]] && rm -f "$prefix/lib/$old"
    done <"$manifest"
  fi
  if [[ $bundle != none ]]; then
    # The compiler's own runtime (ldd may resolve the system's older copy instead).
    local lib path
    for lib in libstdc++.so.6 libgcc_s.so.1 libgomp.so.1; do
      path=$("$cxx" -print-file-name="$lib" 2>/dev/null || true)
      [[ $path == /* && -e $path ]] || continue
      path=$(cd "$(dirname "$path")" && pwd -P)/$(basename "$path")
      is_system_lib "$path" || copy_lib "$path" "$lib"
    done
    # Everything else the build-tree binary resolves (its build RPATH names the link dirs).
    local name arrow resolved rest missing=()
    while read -r name arrow resolved rest; do
      [[ $arrow == "=>" ]] || continue
      case $name in
        libcuda.so* | libnvidia-* | libstdc++.so.6 | libgcc_s.so.1 | libgomp.so.1) continue ;;
      esac
      if [[ $resolved == not ]]; then
        missing+=("$name")
        continue
      fi
      resolved=$(readlink -f "$resolved")  # through link folders (CUDA_EXTRA_LIB_DIRS) to the file
      is_system_lib "$resolved" && continue
      if [[ $bundle == auto && -n $toolkit_libdir && $(dirname "$resolved") == "$toolkit_libdir" ]]; then
        continue
      fi
      copy_lib "$resolved" "$name"
      case $name in
        libcudnn.so*) copy_siblings "$(dirname "$resolved")" 'libcudnn*.so.*' ;;
        libnvrtc.so*) copy_siblings "$(dirname "$resolved")" 'libnvrtc-builtins.so.*' ;;
      esac
    done < <(ldd "$trial_build/kit-opennn-trial")
    ((${#missing[@]} == 0)) ||
      die "libraries of the trial not found at build time: ${missing[*]} (CUDNN_ROOT / CUDA_EXTRA_LIB_DIRS / LD_LIBRARY_PATH)"
  fi
  printf '%s\n' "${bundled[@]}" >"$manifest"
  log "bundled into $prefix/lib: ${bundled[*]:-nothing}"
  log "ldd $bin:"
  ldd "$bin" | sed 's/^/    /' >&2 || true
}

t_all=$(now)
run_stage libjpeg-turbo stage_libjpeg
run_stage configure stage_configure
run_stage opennn stage_opennn
run_stage trial stage_trial
run_stage install stage_install
# The cuDNN version OpenNN's CMake found (it parses the header it will compile against).
seen=$(sed -n 's/^#define KIT_CUDNN_HEADER_VERSION "\([0-9][0-9.]*\)"$/\1/p' "$trial_build/kit_build_info.h" 2>/dev/null || true)
[[ -n $seen ]] && cudnn_version=$seen
total=$(awk -v a="$t_all" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')

# ------------------------------------------------------------------------- build-info.json
json() { # a JSON string
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/ }
  s=${s//$'\n'/ }
  s=${s//$'\r'/ }
  printf '"%s"' "$s"
}
{
  printf '{\n  "opennn_commit": %s,\n' "$(json "$opennn_commit")"
  printf '  "sources": {'
  sep=""
  for t in opennn cudnn-frontend eigen zlib libjpeg-turbo; do
    printf '%s%s: %s' "$sep" "$(json "$t")" "$(json "$(commit_of "$t")")"
    sep=", "
  done
  printf '},\n'
  printf '  "cxx": %s,\n' "$(json "$cxx: $("$cxx" --version | head -n1)")"
  printf '  "cc": %s,\n' "$(json "$cc: $("$cc" --version | head -n1)")"
  if ((cuda_on)); then
    printf '  "nvcc": %s,\n' "$(json "$nvcc: $("$nvcc" --version | grep -i release | head -n1)")"
    printf '  "cuda_archs": %s,\n' "$(json "$cuda_archs")"
  else
    printf '  "nvcc": null,\n  "cuda_archs": null,\n'
  fi
  printf '  "cudnn": %s,\n' "$(json "$cudnn_version")"
  printf '  "cmake": %s,\n' "$(json "$cmake_version")"
  printf '  "march": %s,\n  "lto": %s,\n  "bundle_libs": %s,\n' "$(json "$march")" "$(json "$lto")" "$(json "$bundle")"
  printf '  "bundled": ['
  sep=""
  for b in "${bundled[@]}"; do
    printf '%s%s' "$sep" "$(json "$b")"
    sep=", "
  done
  printf '],\n  "stage_seconds": {'
  sep=""
  for s in "${stage_order[@]}"; do
    printf '%s%s: %s' "$sep" "$(json "$s")" "${seconds[$s]}"
    sep=", "
  done
  printf '},\n  "total_seconds": %s,\n' "$total"
  printf '  "built_at": %s\n}\n' "$(json "$(date -u +%Y-%m-%dT%H:%M:%SZ)")"
} >"$prefix/share/kit-opennn/build-info.json"

for s in "${stage_order[@]}"; do log "$(printf '%-14s %8s s' "$s" "${seconds[$s]}")"; done
log "$(printf '%-14s %8s s' total "$total")"
log "done: $prefix/bin/kit-opennn-trial (build info: $prefix/share/kit-opennn/build-info.json)"
