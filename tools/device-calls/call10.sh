#!/usr/bin/env bash
# Call 10 (issue 16, 2026-12-01 second session): the jax-xla max-batch search at --vram-limit 16376,
# fp32, again with the fixed trial (framework peak = XLA's BFC pool, so the calibrated overhead is
# the memory outside XLA's pool). --start-batch ${START:-8192}: the first search (…102817Z.partial) passed
# 8,192 under a 5.2 GiB smaller cap, so the doubling from 128 would only repeat passes. Stopped by
# SIGINT at the call's end (partial kept). Carry [".whl"].
# Call 11 = the same with the trial not preallocating (the budget as the BFC allocator's limit, grown
# on demand), CALL_LIMIT_S=265 START=12288.
set -u
LIMIT=${CALL_LIMIT_S:-330}  # call 11 ran it with CALL_LIMIT_S=265 and START=12288
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
export JAX_COMPILATION_CACHE_DIR=/tmp/kit-jax-cache
say "jax-xla maxbatch --vram-limit 16376 fp32 (left $(left) s)"
timeout -s INT $(( $(left) - 5 )) tools/device-kitctl.sh run maxbatch --runtime local --engines jax-xla --precision fp32 --vram-limit 16376 --start-batch ${START:-8192} 2>&1 | grep -v '…$'; echo "rc=${PIPESTATUS[0]}"
save "$(ls -t results/maxbatch-*.json | head -1)"
say "used $(gpu_used) MiB; $SECONDS s"
