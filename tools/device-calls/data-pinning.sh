#!/usr/bin/env bash
# Why ffcv's epochs scatter on the lent H200 VM (within one run, whole epochs at 5,100-7,400 images/s at 8 workers,
# each epoch's batches uniform): the same dataload cell (ffcv, jpeg90@256, RAM, batch 256, WORKERS workers, RUNS
# runs, the default window) unpinned, then with the whole run (controller, trial, its worker threads) held by
# taskset to one CPU per physical core, then to WORKERS logical CPUs that pair up as SMT siblings where the VM has
# them (or, without SMT, to the last WORKERS CPUs). The CPU topology (lscpu) is printed first. Carry [".whl", ".whl-data"]. From the repo root there:
#   CALL_LIMIT_S=560 bash tools/device-calls/data-pinning.sh 2>&1 | tee $OUT/data-pinning.log
set -u
LIMIT=${CALL_LIMIT_S:-560}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
IMAGES=${DATA_IMAGES:-20000}
RUNS=${RUNS:-3}
WORKERS=${WORKERS:-8}
data_setup || exit 2
say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader); $(nproc) cores"
lscpu | grep -E '^(Model name|Socket|Core|Thread|NUMA|CPU\(s\)|On-line|Hypervisor|CPU max MHz|CPU MHz)'
lscpu -p=CPU,CORE,SOCKET,NODE | grep -v '^#' | tr '\n' ' '; echo
# one logical CPU per physical core (the first of each core), and the first WORKERS logical CPUs in core order
# (siblings together where the VM exposes SMT)
ONE_PER_CORE=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -k1,1n | awk -F, '!seen[$2]++ {print $1}' | head -n "$WORKERS" | paste -sd,)
SIBLINGS=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -k1,1n | cut -d, -f1 | head -n "$WORKERS" | paste -sd,)
say "one per core: $ONE_PER_CORE; siblings first: $SIBLINGS"
say "data make $IMAGES images"
timeout -s INT $(( $(left) - 5 )) tools/device-kitctl.sh data make --out data/corpus --images "$IMAGES" --workers "$(nproc)" | tail -1
load() {
  local label=$1; shift
  local budget=$(( $(left) - 5 ))
  if (( budget < 40 )); then say "skipped $label (only ${budget}s left)"; return; fi
  say "$label: $* kitctl run dataload ... (left $(left) s)"
  local t0=$SECONDS
  timeout -s INT "$budget" "$@" tools/device-kitctl.sh run dataload --corpus data/corpus --loaders ffcv \
    --workers "$WORKERS" --source ram --encoding jpeg90 --side 256 --runs "$RUNS" --batch 256 --timeout 300 \
    2>&1 | grep -v '…$' | grep -E 'run [0-9]|results/|rc=|error|kitctl:'
  echo "rc=${PIPESTATUS[0]} after $(( SECONDS - t0 )) s"
  local f; f=$(ls -t results/dataload-*.json 2>/dev/null | head -1)
  save "$f"
  python3 - "$f" "$label" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["results"]:
    for r in c.get("runs") or []:
        eps = [round(e["images_per_second"]) for e in r.get("epochs") or []]
        print(f"  {sys.argv[2]} run {r['run']}: {r.get('images_per_second') or 0:,.0f} img/s, halves {r.get('halves_change') or 0:+.1%}, epochs {eps}")
PY
}
load unpinned env
[ -n "$ONE_PER_CORE" ] && load "one-per-core" taskset -c "$ONE_PER_CORE"
if [ -n "$SIBLINGS" ] && [ "$SIBLINGS" != "$ONE_PER_CORE" ]; then load "siblings" taskset -c "$SIBLINGS"
else  # no SMT exposed: the other end of the CPU list instead
  load "last-cpus" taskset -c "$(lscpu -p=CPU | grep -v '^#' | tail -n "$WORKERS" | paste -sd,)"; fi
say "done after ${SECONDS}s"
