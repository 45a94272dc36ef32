#!/usr/bin/env bash
# Calls 12–14 (2026-12-01, third session): issue 16's last H200 cells, then issue 19's guided search,
# as steps run in order while the call's time lasts (a step with under a minute left is skipped; a
# search cut off at the call's end leaves its partial in $OUT: copy it into results/ here and name it
# in the next call's RESUME_* variable). Carry [".whl", ".opennn-src"]; run from the repo root there:
#   bash tools/device-calls/call12.sh STEP... 2>&1 | tee $OUT/call12.log
# Steps:
#   build      the OpenNN trial into build/opennn (tools/device-opennn-build.sh) in the background;
#              the opennn steps wait for it; a warm machine keeps build/ for the next call
#   jax-fp32   run maxbatch --engines jax-xla --vram-limit 16376, fp32 (RESUME_JAX_FP32: --resume it)
#   jax-bf16   the same in bf16 (RESUME_JAX_BF16; JAX_START_BF16, JAX_TIMEOUT: call 16 showed the doubled
#              candidate 44,898 compiling and autotuning past the 150 s timeout, so a rerun needs ~360;
#              JAX_MAX_BF16: --max-batch, so the doubling stops there instead of at 44,898 (a cap that
#              passes ends `censored_at_max_batch`: call 19's 26,000, guessed from XLA's 28.19 GiB floor
#              at 44,898, passed; calls 21-22 then bracketed 26,937 / 27,250); JAX_STRATEGY_BF16: --strategy
#              (default guided)
#              --start-batch: the preallocated pool makes every candidate's peak the pool, so the
#              guided strategy has no slope and bisects as protocol does; the start saves the doubling
#              from 128 (call 9: a 10,218 MiB pool passed fp32 8,704 and ran out at 9,216, so a pool of
#              ~15,400 MiB should hold about 12k in fp32; bf16 stores half the activations)
#   opennn-tp  opennn-resident bf16 runs 4–6: run throughput --resume …054638Z.partial.json --gpu 0
#   opennn-mb  run maxbatch --engines opennn-pool1 --precision bf16 --vram-limit 16376 --strategy guided
#              (RESUME_OPENNN_MB)
#   guided-16k issue 19: pytorch-eager fp32 --strategy guided at 16376 (call-guided.sh's search)
set -u
LIMIT=${CALL_LIMIT_S:-575}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
export JAX_COMPILATION_CACHE_DIR=/tmp/kit-jax-cache  # used by throughput only: the jax trial turns it off for maxbatch (call 20)
BUILD_PID=
OPENNN_TP=results/throughput-resnet50-synthetic-20261201T054638Z.partial.json

# kitctl with the time that is left (SIGINT 5 s before the call's end: the partial is kept), then
# the newest complete artifact and the newest partial copied to $OUT.
kit() {
  timeout -s INT $(( $(left) - 5 )) tools/device-kitctl.sh "$@" 2>&1 | grep -v '…$'
  echo "rc=${PIPESTATUS[0]}"
  save "$(ls -t results/*.json | grep -v partial | head -1)" "$(newest_partial)"
}
search() { # ENGINE PRECISION RESUME [more flags]
  local engine=$1 precision=$2 resume=$3; shift 3
  if [ -n "$resume" ]; then  # a resume keeps the partial's configuration; only its --timeout may change
    local timeout=(); while [ $# -gt 0 ]; do [ "$1" = --timeout ] && timeout=(--timeout "$2"); shift; done
    kit run maxbatch --resume "$resume" --gpu 0 "${timeout[@]}"
  else kit run maxbatch --runtime local --engines "$engine" --precision "$precision" --vram-limit 16376 "$@"; fi
}
opennn_ready() {
  if [ -n "$BUILD_PID" ]; then say "waiting for the OpenNN build"; wait "$BUILD_PID"; BUILD_PID=; fi
  [ -x build/opennn/bin/kit-opennn-trial ] || { say "no OpenNN trial built"; return 1; }
}

for step in "$@"; do
  if [ "$(left)" -lt 60 ]; then say "no time left for $step"; continue; fi
  say "$step (left $(left) s; GPU used $(gpu_used) MiB)"
  case "$step" in
    build)
      if [ -x build/opennn/bin/kit-opennn-trial ]; then say "OpenNN trial already built"; continue; fi
      # 12 of 16 cores: a jax search runs beside it (its XLA compiles are CPU work; peaks are unaffected)
      ( JOBS=12 tools/device-opennn-build.sh > "$OUT/opennn-build.log" 2>&1; echo "build rc=$?" >> "$OUT/opennn-build.log" ) &
      BUILD_PID=$! ;;
    jax-fp32) search jax-xla fp32 "${RESUME_JAX_FP32:-}" --strategy guided --timeout 150 --start-batch "${JAX_START_FP32:-12288}" ;;
    jax-bf16) search jax-xla bf16 "${RESUME_JAX_BF16:-}" --strategy "${JAX_STRATEGY_BF16:-guided}" --timeout "${JAX_TIMEOUT:-150}" \
      --start-batch "${JAX_START_BF16:-20480}" ${JAX_MAX_BF16:+--max-batch "$JAX_MAX_BF16"} ;;
    opennn-tp) opennn_ready && kit run throughput --resume "$OPENNN_TP" --gpu 0 ;;
    opennn-mb) opennn_ready && search opennn-pool1 bf16 "${RESUME_OPENNN_MB:-}" --strategy guided --timeout 240 ;;
    guided-16k) search pytorch-eager fp32 "${RESUME_GUIDED:-}" --strategy guided --timeout 120 ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
[ -n "$BUILD_PID" ] && { say "waiting for the OpenNN build"; wait "$BUILD_PID"; }
cp build/opennn/share/kit-opennn/build-info.json "$OUT/opennn-build-info.json" 2>/dev/null
say "done in $SECONDS s; GPU used $(gpu_used) MiB"
