#!/usr/bin/env bash
# Max batch on several card sizes in one command (a --vram-limit list) on the H200: pytorch-eager fp32, local
# runtime, --slots auto, each size its own artifact. Carry [".whl"] (tools/device-wheels.sh here first, then
# tools/device-kitctl.sh --stamp). From the repo root there:
#   CALL_LIMIT_S=540 bash tools/device-calls/call-catalogue.sh 2>&1 | tee $OUT/catalogue.log
# PRESTART=1 adds --prestart (the next candidates' processes started ahead, docs/running.md).
# SIZES (default 8192,rtx4080,rtx4090,a100-40g,rtx3060,rtx-a6000) run in the order given; when the call's time is
# up the run is stopped (SIGINT): the sizes done are whole artifacts, the one running keeps its partial. The
# artifacts are written straight under $OUT/results (--results-dir): a call cut off by the machine's own limit
# still returns every size finished before it (its first use saved them only at its end, and lost them so).
set -u
LIMIT=${CALL_LIMIT_S:-540}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
SIZES=${SIZES:-8192,rtx4080,rtx4090,a100-40g,rtx3060,rtx-a6000}
say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader); $(nproc) cores; used $(gpu_used) MiB"
PRE=(); [ "${PRESTART:-0}" = 1 ] && PRE=(--prestart)
say "pytorch-eager fp32 --vram-limit $SIZES --slots auto ${PRE[*]} (left $(left) s)"
t0=$SECONDS
timeout -s INT $(( $(left) - 10 )) tools/device-kitctl.sh run maxbatch --runtime local --engines pytorch-eager \
  --precision fp32 --vram-limit "$SIZES" --timeout 120 --slots auto "${PRE[@]}" --results-dir "$OUT/results" 2>&1 | grep -v '…$'; echo "rc=${PIPESTATUS[0]}"
say "took $(( SECONDS - t0 )) s"
python3 - "$OUT"/results/maxbatch-*.json <<'PY'
import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    for c in d["results"]:
        print(f"{f.split('/')[-1]}: L {d['budget']['limit_mib']:,} MiB, {d.get('slots', {}).get('slots')} slots, "
              f"{c['engine']} {c['precision']}: {c.get('max_batch')}/{c.get('next_batch')} ({c.get('search_status')}), "
              f"{len(c.get('trials', []))} candidates, wall {c.get('slots_wall_s')} s, state {d['state']}, "
              f"{d.get('created_utc')} to {d.get('finished_utc')}")
PY
say "used $(gpu_used) MiB; $SECONDS s"
