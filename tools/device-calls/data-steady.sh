#!/usr/bin/env bash
# Data loading under the steady window (the defaults: a warm-up epoch, then whole epochs until >= 50,000 images
# and >= 30 s) on the lent H200, local runtime, 16 workers, from RAM, jpeg90@256, batch 256. Carry
# [".whl", ".whl-data"] (tools/device-wheels.sh and tools/build-ffcv-wheel.sh here). From the repo root there:
#   CALL_LIMIT_S=585 bash tools/device-calls/data-steady.sh STEP... 2>&1 | tee $OUT/data-steady.log
# Steps, in the order given, each stopped (SIGINT: its partial is kept and copied to $OUT) when the call's time
# is up:
#   load       kitctl run dataload, LOADERS (default ffcv,pytorch-nvjpeg), RUNS runs (default 3), jpeg90@256
#   load:L:E:S the same for loaders L, encoding E and side S (e.g. load:ffcv:raw:256, load:ffcv:jpeg90:512)
#   yardstick  tools/nvjpeg_pipeline.py on the same folder dataset: a plain batched decode_jpeg(device=cuda)
#              pipeline timed by the same window as dataload (its defaults passed: 50,000 images, 30 s);
#              pytorch-nvjpeg's figure is set against it
#   e2e        kitctl run train-e2e, resnet50, E2E_LOADERS (default ffcv), E2E_RUNS runs (default 3): its
#              loader-alone figure against dataload's for the same data, source and workers
#   resume     RESUME=<partial>: continue a partial of a previous call on this (warm) machine
#   probe      tools/cpu_probe.py: a fixed decode-and-resize workload on every core for PROBE_S seconds (default
#              90), its rate in 2-s blocks (about one epoch of the corpus): how steady the machine's CPU capacity
#              is, with the epochs of every dataload artifact this call made beside it
# E2E_WORKERS (default 16) applies to e2e; WORKERS (default 16; a comma list sweeps), SOURCE (default ram; cold, or ram,cold) and WINDOW_S (dataload's
# --window-seconds) apply to the load steps.
# The corpus (DATA_IMAGES, default 20,000) is made once per machine under data/ and reused by a later call on
# the same warm machine.
set -u
LIMIT=${CALL_LIMIT_S:-585}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
IMAGES=${DATA_IMAGES:-20000}
RUNS=${RUNS:-3}
LOADERS=${LOADERS:-ffcv,pytorch-nvjpeg}
E2E_LOADERS=${E2E_LOADERS:-ffcv}
E2E_RUNS=${E2E_RUNS:-3}
E2E_WORKERS=${E2E_WORKERS:-16}
WORKERS=${WORKERS:-16}
SOURCE=${SOURCE:-ram}
WINDOW=()  # WINDOW_S=<s>: dataload's --window-seconds (a longer window than the default 30 s)
[ -n "${WINDOW_S:-}" ] && WINDOW=(--window-seconds "$WINDOW_S")

data_setup || exit 2
say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader); $(nproc) cores; $(free -g | awk '/Mem/ {print $2}') GiB RAM"
python3 -c "import ffcv, torch, torchvision; print('ffcv', ffcv.__version__, 'torch', torch.__version__, 'torchvision', torchvision.__version__)" || exit 2

kit() {
  local budget=$(( $(left) - 5 ))
  if (( budget < 40 )); then say "skipped (only ${budget}s left): $*"; return; fi
  say "kitctl $* (left $(left) s)"
  local t0=$SECONDS
  timeout -s INT "$budget" tools/device-kitctl.sh "$@" 2>&1 | grep -v '…$'
  echo "rc=${PIPESTATUS[0]} after $(( SECONDS - t0 )) s"
  save "$(ls -t results/*.json 2>/dev/null | grep -v partial | head -1)" "$(newest_partial)"
}

if [ ! -f data/corpus/manifest.json ]; then
  say "data make $IMAGES images"
  t0=$SECONDS
  timeout -s INT $(( $(left) - 5 )) tools/device-kitctl.sh data make --out data/corpus --images "$IMAGES" --workers "$(nproc)"
  say "data make: $(( SECONDS - t0 )) s"
else
  say "corpus exists"
fi

for step in "$@"; do
  case $step in
    load|load:*)
      IFS=: read -r _ l e s <<< "$step"
      kit run dataload --corpus data/corpus --loaders "${l:-$LOADERS}" --workers "$WORKERS" --source "$SOURCE" \
        --encoding "${e:-jpeg90}" --side "${s:-256}" --runs "$RUNS" --batch 256 --timeout 300 "${WINDOW[@]}" ;;
    yardstick)
      ds=$(find data -maxdepth 3 -type d -name "folder-jpeg90-256-n${IMAGES}*" | head -1)
      if [ -z "$ds" ] || (( $(left) < 60 )); then say "yardstick skipped (dataset '$ds', left $(left) s)"; continue; fi
      say "tools/nvjpeg_pipeline.py --dataset $ds (left $(left) s)"
      t0=$SECONDS
      timeout -s INT $(( $(left) - 5 )) python3 tools/nvjpeg_pipeline.py --dataset "$ds" --batch 256 --window-images 50000 --window-seconds 30 | tee "$OUT/nvjpeg-yardstick.json"
      echo "rc=${PIPESTATUS[0]} after $(( SECONDS - t0 )) s" ;;
    e2e) kit run train-e2e --corpus data/corpus --model resnet50 --loaders "$E2E_LOADERS" --workers "$E2E_WORKERS" \
           --encoding jpeg90 --side 256 --batch 256 --runs "$E2E_RUNS" --timeout 300 ;;
    probe)
      if (( $(left) < ${PROBE_S:-90} + 20 )); then say "probe skipped (left $(left) s)"; continue; fi
      n=$(ls "$OUT"/probe-*.json 2>/dev/null | wc -l)
      say "tools/cpu_probe.py --seconds ${PROBE_S:-90} (left $(left) s)"
      python3 tools/cpu_probe.py --seconds "${PROBE_S:-90}" --dataload $(ls "$OUT"/dataload-*.json 2>/dev/null) \
        --out "$OUT/probe-$((n + 1)).json" | python3 -c "import json,sys; d=json.load(sys.stdin); p=d['probe']
print('probe', d['workload']['item'], d['window']['items_per_second'], 'cv', round(p['cv'], 4), 'lag1', round(p['lag1'], 2),
      'halves', round(100 * p['halves_change'], 2), '%', 'min', p['min'], 'max', p['max'])" ;;
    resume) kit run "${RESUME_KIND:?RESUME_KIND=dataload|train-e2e}" --resume "${RESUME:?RESUME=<partial>}" ;;
    *) say "unknown step $step" ;;
  esac
done
say "done after ${SECONDS}s"
