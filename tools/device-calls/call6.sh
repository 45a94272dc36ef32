#!/usr/bin/env bash
# Call 6 (issue 16): the whole-step graph comparison (tools/compare_cudagraph.py: the trial's
# capture vs the one before issue 16 vs a plain canonical graph, cuDNN autotuning on as the
# throughput trial has it, fp32 and bf16), then throughput at batch 128, both precisions, 6 runs:
# pytorch-cudagraph, jax-xla, pytorch-eager (each stopped by SIGINT when the call's time is up:
# the partial artifact is kept). JAX's persistent compilation cache is on (JAX_COMPILATION_CACHE_DIR):
# it shortens the warm-up of runs 2..6 (compilation is outside the timed window either way).
# Carry [".whl"].
set -u
LIMIT=${CALL_LIMIT_S:-580}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
say "compare_cudagraph (left $(left) s)"
timeout -s INT 220 python3 tools/compare_cudagraph.py --out $OUT/compare-cudagraph-h200.json --variants eager,kit,legacy,plain --cudnn-benchmark on --precision fp32,bf16 2>&1 | tail -40; echo "rc=${PIPESTATUS[0]}"
tp() { # ENGINE
  if [ "$(left)" -lt 40 ]; then say "no time left for $1"; return; fi
  say "throughput $1 both, 6 runs (left $(left) s)"
  timeout -s INT $(( $(left) - 3 )) tools/device-kitctl.sh run throughput --runtime local --engines "$1" --precision both --batch 128 --runs 6 2>&1 | grep -v '…$'; echo "rc=${PIPESTATUS[0]}"
  save "$(ls -t results/throughput-*.json | head -1)"
}
tp pytorch-cudagraph
export JAX_COMPILATION_CACHE_DIR=/tmp/kit-jax-cache
tp jax-xla
unset JAX_COMPILATION_CACHE_DIR
tp pytorch-eager
say "used $(gpu_used) MiB; $SECONDS s"
