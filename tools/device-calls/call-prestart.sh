#!/usr/bin/env bash
# --slots auto with --prestart on the H200, beside Lightning's binsearch, in one call (nvidia-h200, carry [".whl"]:
# tools/device-wheels.sh here first, then tools/device-kitctl.sh --stamp):
#   CALL_LIMIT_S=560 bash tools/device-calls/call-prestart.sh 2>&1 | tee $OUT/prestart.log
# 1. pytorch-eager fp32 at 16,376 MiB, local runtime, --slots auto --prestart; the answer against the committed
#    one-slot pair (8,832/8,833), the search's wall time (slots_wall_s) and each candidate's phases;
# 2. Lightning's binsearch (max_val 65536, margin 0) and accelerate's finder under the cap of step 1's own
#    candidates (--like that artifact), so both tools answer the same question in the same call;
# After each cell its (max, next) pair runs again by a one-slot search without --prestart (VERIFY=0 skips).
# 3. pytorch-eager bf16 the same way, against the one-slot pair under today's cap (17,024/17,025,
#    results/reference/maxbatch-resnet50-synthetic-20261204T135243Z.json).
# PRESTART_BY (fork, the default, or spares) is passed as --prestart-by. SPARES_AB=1 then runs step 1 once more with
# --prestart-by spares, the same card, for the comparison of the two ways (when time is left).
# BF16=0 skips step 3. Every artifact is copied to $OUT as soon as its step ends (a call cut short keeps what finished).
set -u
LIMIT=${CALL_LIMIT_S:-560}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
nproc; python3 -c "import torch; print('torch', torch.__version__)"
summary() {  # the answer against the reference, slots, wall time, per-candidate phase medians
python3 - "$1" "$2" "$3" <<'EOF'
import json, statistics as st, sys
doc = json.load(open(sys.argv[1])); want = (int(sys.argv[2]), int(sys.argv[3]))
print("slots:", doc.get("slots"), "prestart:", doc["configuration"].get("prestart"),
      doc["configuration"].get("prestart_by"))
for c in doc["results"]:
    got = (c["max_batch"], c["next_batch"])
    print(f"{c['engine']} {c['precision']}: {got} (reference {want}: {'SAME' if got == want else 'DIFFERENT'}); "
          f"{len(c['trials'])} candidates, {len(c.get('cancelled', []))} cancelled; wall {c.get('slots_wall_s')} s")
    ph = [t["result"].get("phases") or {} for t in c["trials"] if t.get("result")]
    keys = sorted({k for p in ph for k in p})
    print("  candidate wall median", round(st.median([t["elapsed_s"] for t in c["trials"]]), 2), "s; phases medians:",
          {k: round(st.median([p[k] for p in ph if k in p]), 3) for k in keys})
    pre = [t["result"].get("prestart") for t in c["trials"] if t.get("result") and t["result"].get("prestart")]
    if pre:
        print("  prestart medians:", {k: round(st.median([p[k] for p in pre]), 3) for k in pre[0]})
EOF
}
run_cell() {  # precision, reference max, reference next[, prestart-by]
  prec=$1 by=${4:-${PRESTART_BY:-fork}}
  say "pytorch-eager $1 at 16,376 MiB, --slots auto --prestart --prestart-by $by (left $(left) s); used $(gpu_used) MiB"
  local t0=$SECONDS
  timeout -s INT $(( $(left) - 10 )) tools/device-kitctl.sh run maxbatch --runtime local --engines pytorch-eager \
    --precision "$1" --vram-limit 16376 --timeout 120 --slots auto --prestart --prestart-by "$by" 2>&1 | grep -v '…$'
  echo "rc=${PIPESTATUS[0]}"
  say "took $(( SECONDS - t0 )) s"
  final="$(ls -t results/maxbatch-*.json 2>/dev/null | grep -v partial | head -1)"
  save "$final"; save "$(newest_partial)"
  [ -n "$final" ] && summary "$final" "$2" "$3"
  # The pair again, one candidate at a time without --prestart, on this card (VERIFY=0 skips): the slots answer
  # checked by a sequential search under the same cap, whatever card the call got.
  if [ "${VERIFY:-1}" = 1 ] && [ -n "$final" ] && (( $(left) > 120 )); then
    local pair; pair=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['results'][0]; print(c['max_batch'], c['next_batch'])" "$final")
    set -- $pair
    say "$1/$2 by a one-slot search (left $(left) s)"
    timeout -s INT $(( $(left) - 60 )) tools/device-kitctl.sh run maxbatch --runtime local --engines pytorch-eager \
      --precision "$prec" --vram-limit 16376 --timeout 120 --start-batch "$1" --max-batch "$2" 2>&1 | grep -v '…$'
    echo "rc=${PIPESTATUS[0]}"
    save "$(ls -t results/maxbatch-*.json 2>/dev/null | grep -v partial | head -1)"
  fi
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
run_cell fp32 8832 8833
fp32_art=$final  # the slots artifact (the check above does not change it)
if [ -n "$fp32_art" ] && (( $(left) > 80 )); then
  say "peers, fp32, the cap of $fp32_art (left $(left) s)"
  timeout $(( $(left) - 10 )) python3 tools/peer_batch_finders.py --like "$fp32_art" --engine pytorch-eager \
    --precision fp32 --lightning-max-val 65536 --lightning-margin 0 --out "$OUT/peers-fp32-max65536-margin0.json" | tail -4
fi
[ "${BF16:-1}" = 1 ] && (( $(left) > 100 )) && run_cell bf16 17024 17025
[ "${SPARES_AB:-0}" = 1 ] && (( $(left) > 90 )) && run_cell fp32 8832 8833 spares
ls -t ~/.kitctl 2>/dev/null | head -2
say "used $(gpu_used) MiB; $SECONDS s"
