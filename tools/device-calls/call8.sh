#!/usr/bin/env bash
# Call 8 (issue 16, 2026-12-01 second session): PyTorch eager bf16 runs 5-6 (resume of the partial
# throughput-…060130Z), then pytorch-compile-graphs (torch.compile mode="reduce-overhead", optimizer
# inside) at batch 128, both precisions, 6 runs, stopped by SIGINT when the call's time is up (the
# partial is kept and resumable). Inductor's on-disk caches (FX graph + autotuning) live in
# TORCHINDUCTOR_CACHE_DIR for the whole call: run 1 of a precision compiles from scratch, later runs
# of it may hit the cache; compilation is in the warm-up, outside the timed window, either way.
# Carry [".whl"].
set -u
LIMIT=${CALL_LIMIT_S:-580}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
say "resume pytorch-eager bf16 (left $(left) s)"
timeout -s INT 90 tools/device-kitctl.sh run throughput --resume results/throughput-resnet50-synthetic-20261201T060130Z.partial.json 2>&1 | grep -v '…$'; echo "rc=${PIPESTATUS[0]}"
save results/throughput-resnet50-synthetic-20261201T060130Z.json results/throughput-resnet50-synthetic-20261201T060130Z.partial.json
export TORCHINDUCTOR_CACHE_DIR=/tmp/kit-inductor-cache
say "pytorch-compile-graphs both, 6 runs (left $(left) s)"
timeout -s INT $(( $(left) - 5 )) tools/device-kitctl.sh run throughput --runtime local --engines pytorch-compile-graphs --precision both --batch 128 --runs 6 2>&1 | grep -v '…$'; echo "rc=${PIPESTATUS[0]}"
save "$(ls -t results/throughput-*.json | head -1)"
du -sh /tmp/kit-inductor-cache 2>/dev/null
say "used $(gpu_used) MiB; $SECONDS s"
