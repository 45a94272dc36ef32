#!/usr/bin/env bash
# Throughput under the window rule on the lent H200 (local runtime, the machine's own torch and jax),
# as steps run in order while the call's time lasts. Carry [".whl"]; from the repo root there:
#   CALL_LIMIT_S=585 bash tools/device-calls/throughput.sh STEP... 2>&1 | tee $OUT/throughput.log
# Every kitctl run gets SIGINT 5 s before the call's end (its partial is kept: copy it into results/
# here and continue it with RESUME=<partial> in the next call); each artifact is copied to $OUT.
# Steps (defaults: every GPU engine's default window, --runs RUNS, both precisions):
#   fast32     pytorch-eager, pytorch-cudagraph, jax-xla at 32x32, batch 128
#   compile32  pytorch-compile-graphs, pytorch-compile at 32x32, batch 128 (COMPILE_RUNS, default 3)
#   img224     IMG_ENGINES (default pytorch-cudagraph,jax-xla) at 224x224, batch IMG_BATCH (default 256),
#              IMG_RUNS runs (default 3)
#   resume     RESUME="<partial>..." --resume each on GPU 0 (a fresh machine is another card of the same kind)
#   old50      jax-xla fp32 with the old fixed window (--warmup-steps 10 --steps 50), RUNS runs: the same
#              call measures what the window rule replaced
#   opennn-build  build the OpenNN trial into build/opennn (tools/device-opennn-build.sh; carry .opennn-src);
#              ~2 min; its build is ~0.9 GB, too large to carry back, so each call that runs OpenNN builds it
#   opennn     opennn-build, then opennn-graph, opennn-resident at 32x32, batch 128, RUNS runs
# RESUME_FLAGS: more flags for each resume (e.g. --allow-code-change, recorded in the artifact).
set -u
LIMIT=${CALL_LIMIT_S:-585}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
# Throughput may reuse compiled executables across its runs (compilation is outside the window); max-batch
# turns the cache off in the trial itself.
export JAX_COMPILATION_CACHE_DIR=/tmp/kit-jax-cache
RUNS=${RUNS:-5}

kit() {
  local budget=$(( $(left) - 5 ))
  if (( budget < 30 )); then say "skipped (only ${budget}s left): $*"; return; fi
  say "kitctl $*"
  timeout -s INT "$budget" tools/device-kitctl.sh "$@" 2>&1 | grep -v '…$'
  echo "rc=${PIPESTATUS[0]}"
  save "$(ls -t results/*.json 2>/dev/null | grep -v partial | head -1)" "$(newest_partial)"
}
tp() { kit run throughput --runtime local --precision both "$@"; }
build_opennn() {
  [[ -x build/opennn/bin/kit-opennn-trial ]] && return 0
  say "build OpenNN"
  tools/device-opennn-build.sh >"$OUT/opennn-build.log" 2>&1 || { tail -30 "$OUT/opennn-build.log"; say "BUILD FAILED"; return 1; }
  tail -3 "$OUT/opennn-build.log"
}

say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader)"
say "python3 $(python3 -c 'import sys, torch, jax; print(sys.version.split()[0], "torch", torch.__version__, "jax", jax.__version__)' 2>/dev/null)"
for step in "$@"; do
  case $step in
    fast32) tp --engines pytorch-eager,pytorch-cudagraph,jax-xla --runs "$RUNS" ;;
    compile32) tp --engines pytorch-compile-graphs,pytorch-compile --runs "${COMPILE_RUNS:-3}" ;;
    img224) tp --engines "${IMG_ENGINES:-pytorch-cudagraph,jax-xla}" --runs "${IMG_RUNS:-3}" --image-size 224 \
              --batch "${IMG_BATCH:-256}" ;;
    resume) for partial in ${RESUME:?RESUME=<partial> [<partial>...]}; do  # another machine: another UUID
              kit run throughput --resume "$partial" --gpu 0 ${RESUME_FLAGS:-}; done ;;
    opennn-build) build_opennn ;;
    opennn) build_opennn && tp --engines opennn-graph,opennn-resident --runs "$RUNS" --batch 128 ;;
    old50) kit run throughput --runtime local --engines jax-xla --precision fp32 --runs "$RUNS" --warmup-steps 10 --steps 50 ;;
    *) say "unknown step $step" ;;
  esac
done
say "done after ${SECONDS}s"
