#!/usr/bin/env bash
# Call 9 (issue 16, 2026-12-01 second session): the two throughput partials of the first session
# resumed on this call's H200 (another card of the same model, memory and driver: `--gpu 0`, which
# the artifact records in its resume entry): pytorch-eager bf16 runs 5-6 (…060130Z) and, after
# building OpenNN for the local runtime (tools/device-opennn-build.sh), opennn-resident bf16 runs 4-6
# (…054638Z). Then, with what is left, the jax-xla max-batch search at --vram-limit 16376, fp32 then
# bf16, stopped by SIGINT at the call's end (the partial is kept and resumable).
# Carry [".opennn-src", ".whl"].
set -u
LIMIT=${CALL_LIMIT_S:-580}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
E=results/throughput-resnet50-synthetic-20261201T060130Z
O=results/throughput-resnet50-synthetic-20261201T054638Z
say "resume pytorch-eager bf16 on --gpu 0 (left $(left) s)"
timeout -s INT 100 tools/device-kitctl.sh run throughput --resume $E.partial.json --gpu 0 2>&1 | grep -v '…$'; echo "rc=${PIPESTATUS[0]}"
save $E.json $E.partial.json
say "build OpenNN"; tools/device-opennn-build.sh >$OUT/opennn-build9.log 2>&1 || { tail -30 $OUT/opennn-build9.log; echo BUILD FAILED; exit 1; }
tail -3 $OUT/opennn-build9.log; cp build/opennn/share/kit-opennn/build-info.json $OUT/opennn-build-info9.json
say "resume opennn-resident bf16 on --gpu 0 (left $(left) s)"
timeout -s INT $(( $(left) - 60 )) tools/device-kitctl.sh run throughput --resume $O.partial.json --gpu 0 2>&1 | grep -v '…$'; echo "rc=${PIPESTATUS[0]}"
save $O.json $O.partial.json
if [ "$(left)" -lt 60 ]; then say "no time left for jax-xla maxbatch"; exit 0; fi
export JAX_COMPILATION_CACHE_DIR=/tmp/kit-jax-cache
say "jax-xla maxbatch --vram-limit 16376 both (left $(left) s)"
timeout -s INT $(( $(left) - 5 )) tools/device-kitctl.sh run maxbatch --runtime local --engines jax-xla --precision both --vram-limit 16376 2>&1 | grep -v '…$'; echo "rc=${PIPESTATUS[0]}"
save "$(ls -t results/maxbatch-*.json | head -1)"
say "used $(gpu_used) MiB; $SECONDS s"
