#!/usr/bin/env bash
# Build the OpenNN trial on the project's lent GPU machine (no network, no Docker) into
# build/opennn/, where the local runtime looks for it: images/opennn/build.sh, unchanged, over
# the sources tools/opennn-sources-here.sh put in .opennn-src/ (carried there), with that
# machine's compilers (GCC 13 in /opt/gcc, nvcc 13.0) and the cuDNN of its PyTorch wheels.
#   tools/device-opennn-build.sh            (env: CUDA_ARCHS default 90, JOBS, OPENNN_LTO ...)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d .opennn-src/opennn ]] || { echo "device-opennn-build: no .opennn-src/ (run tools/opennn-sources-here.sh here and carry it)" >&2; exit 2; }
nvidia=$(python3 -c 'import nvidia, sys; sys.stdout.write(list(nvidia.__path__)[0])')
export CUDNN_ROOT=$nvidia/cudnn CUDA_EXTRA_LIB_DIRS=$nvidia/cu13/lib
export CXX=${CXX:-/opt/gcc/bin/g++} CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
[[ -x /opt/gcc/bin/gcc ]] && export CC=${CC:-/opt/gcc/bin/gcc}
# Hopper only (the machine it runs on) and no LTO: a fast build for a memory benchmark; the image
# builds 80;86;89;90 with OpenNN's default LTO. build-info.json records what was used.
export CUDA_ARCHS=${CUDA_ARCHS:-90} OPENNN_LTO=${OPENNN_LTO:-OFF}
images/opennn/build.sh .opennn-src "$PWD/build/opennn"
# Which kit code the program was built from (an artifact carries build-info.json as build_info):
# the commit as tools/device-kitctl.sh finds it (.kit-commit there) and the trial sources' hash.
PYTHONPATH="$PWD/host" python3 - build/opennn/share/kit-opennn/build-info.json <<'EOF'
import json, sys
from kitctl.core.provenance import git_state, trial_code
path = sys.argv[1]
with open(path) as f:
    info = json.load(f)
state = git_state()
info["kit"] = {"git_commit": state.commit, "git_dirty": state.dirty, "git_source": state.source,
               "trial_code": trial_code("opennn-pool1").to_json()}
with open(path, "w") as f:
    json.dump(info, f, indent=2)
EOF
