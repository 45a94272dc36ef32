#!/usr/bin/env bash
# Call 5 (issue 16): OpenNN built for the local runtime (tools/device-opennn-build.sh), then
# opennn-resident (GPU-resident data, CUDA graphs off: the control) throughput fp32 and bf16,
# 6 runs each, and one local opennn-graph run to repeat the CUDA-graph audit outside Docker.
# Carry [".opennn-src", ".whl"].
set -u
LIMIT=${CALL_LIMIT_S:-575}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
say "build OpenNN"; tools/device-opennn-build.sh >$OUT/opennn-build5.log 2>&1 || { tail -30 $OUT/opennn-build5.log; echo BUILD FAILED; exit 1; }
tail -3 $OUT/opennn-build5.log; cp build/opennn/share/kit-opennn/build-info.json $OUT/opennn-build-info5.json
say "opennn-resident throughput local both precisions, 6 runs (left $(left) s)"
timeout -s INT $(( $(left) - 40 )) tools/device-kitctl.sh run throughput --runtime local --engines opennn-resident --precision both --batch 128 --warmup-steps 390 --steps 780 --runs 6; echo "rc=$?"
save "$(ls -t results/throughput-*.json | grep -v partial | head -1)"; save "$(ls -t results/throughput-*.partial.json 2>/dev/null | head -1)"
if [ "$(left)" -lt 40 ]; then say "no time left for the local opennn-graph run"; exit 0; fi
say "opennn-graph local fp32, 1 run (left $(left) s)"
timeout -s INT $(( $(left) - 3 )) tools/device-kitctl.sh run throughput --runtime local --engines opennn-graph --precision fp32 --batch 128 --warmup-steps 390 --steps 780 --runs 1; echo "rc=$?"
save "$(ls -t results/throughput-*.json | grep -v partial | head -1)"
say "used $(gpu_used) MiB; $SECONDS s"
