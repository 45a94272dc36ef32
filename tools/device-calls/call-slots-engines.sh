#!/usr/bin/env bash
# --slots auto for the engines other than PyTorch, in as few calls as the time allows (nvidia-h200, carry
# [".whl", ".opennn-src"]: tools/opennn-sources-here.sh and tools/device-wheels.sh here first, then
# tools/device-kitctl.sh --stamp):
#   CALL_LIMIT_S=575 bash tools/device-calls/call-slots-engines.sh STEP... 2>&1 | tee $OUT/slots-engines.log
# Steps, run in order while the call's time lasts (every artifact and partial is copied to $OUT as it ends):
#   opennn   build the OpenNN trial (tools/device-opennn-build.sh, all cores), then opennn-pool1 bf16 at 16,376 MiB,
#            guided, --timeout 240 --slots auto: the committed one-slot search's settings
#            (results/reference/maxbatch-resnet50-synthetic-20261201T164402Z.json: 12,204 / 12,205)
#   jax      jax-xla fp32 at 16,376 MiB, guided, --timeout 150 --start-batch 12288 --slots auto (the committed
#            one-slot search: 13,568 / 13,569, …20261201T163217Z.json); RESUME_JAX=<partial> resumes one instead
#            (put it under results/ here first: untracked files travel with the call)
#   pytorch  pytorch-eager fp32 and bf16 at 16,376 MiB, --slots auto --prestart (fork server), with Lightning's
#            and accelerate's finders beside fp32: tools/device-calls/call-prestart.sh (BF16=1 VERIFY=0) in the time
#            left, its own log lines in this one; only when the card is an H200 (PYTORCH_ANY_CARD=1: any card)
#   pairs    the two catalogue sizes whose slots answers no one-slot search has checked (12,288 MiB: 6,400 / 6,401;
#            49,140 MiB: 28,224 / 28,225, 2026-12-07 on an H100), each pair by a one-slot search
set -u
LIMIT=${CALL_LIMIT_S:-575}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
nproc; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
kit() {  # kitctl with the time left (SIGINT 10 s before the call's end: the partial is kept), then its files to $OUT
  touch /tmp/kit-call-mark
  timeout -s INT $(( $(left) - 10 )) tools/device-kitctl.sh "$@" 2>&1 | grep -v '…$'
  echo "rc=${PIPESTATUS[0]}"
  # only what this command wrote (a cut run has no new artifact: then no answer is printed for it)
  final="$(find results -maxdepth 1 -name 'maxbatch-*.json' ! -name '*.partial.json' -newer /tmp/kit-call-mark | head -1)"
  save "$final" "$(find results -maxdepth 1 -name '*.partial.json' -newer /tmp/kit-call-mark | head -1)"
}
answer() {  # artifact, reference max, reference next
python3 - "$@" <<'EOF'
import json, statistics as st, sys
doc = json.load(open(sys.argv[1])); want = (int(sys.argv[2]), int(sys.argv[3]))
print("slots:", doc["configuration"].get("slots"), doc.get("slots"))
for c in doc["results"]:
    got = (c["max_batch"], c["next_batch"])
    print(f"{c['engine']} {c['precision']}: {got} (one-slot {want}: {'SAME' if got == want else 'DIFFERENT'}); "
          f"{len(c['trials'])} candidates, {len(c.get('cancelled', []))} cancelled; search wall {c.get('slots_wall_s')} s; "
          f"{c.get('search_status')}: {c.get('reason')}")
    for t in c["trials"]:
        print(f"  {t['batch']:>6} {t['status']:<28} {t['elapsed_s']:7.1f} s attempt {t.get('attempt')}")
EOF
}
for step in "$@"; do
  if [ "$(left)" -lt 60 ]; then say "no time left for $step"; continue; fi
  say "$step (left $(left) s; GPU used $(gpu_used) MiB)"
  t0=$SECONDS
  case "$step" in
    opennn)
      if [ ! -x build/opennn/bin/kit-opennn-trial ]; then
        JOBS=$(nproc) timeout $(( $(left) - 60 )) tools/device-opennn-build.sh > "$OUT/opennn-build.log" 2>&1
        echo "build rc=$?"; tail -3 "$OUT/opennn-build.log"
      fi
      [ -x build/opennn/bin/kit-opennn-trial ] || { say "no OpenNN trial"; continue; }
      cp build/opennn/share/kit-opennn/build-info.json "$OUT/opennn-build-info.json"
      kit run maxbatch --runtime local --engines opennn-pool1 --precision bf16 --vram-limit 16376 --strategy guided \
        --timeout 240 --slots auto
      [ -n "$final" ] && answer "$final" 12204 12205 ;;
    jax)
      python3 -c "import jax; print('jax', jax.__version__)"
      if [ -n "${RESUME_JAX:-}" ]; then kit run maxbatch --resume "$RESUME_JAX" --gpu 0
      else kit run maxbatch --runtime local --engines jax-xla --precision fp32 --vram-limit 16376 --strategy guided \
        --timeout 150 --start-batch 12288 --slots auto; fi
      [ -n "$final" ] && answer "$final" 13568 13569 ;;
    pytorch)
      if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || [ "${PYTORCH_ANY_CARD:-0}" = 1 ]; then
        BF16=1 VERIFY=0 CALL_LIMIT_S=$(( $(left) - 5 )) bash tools/device-calls/call-prestart.sh
      else say "pytorch skipped: not an H200 (its H100 figures are committed)"; fi ;;
    pairs)
      for size in "12288 6400 6401" "49140 28224 28225"; do
        set -- $size
        (( $(left) > 90 )) || break
        kit run maxbatch --runtime local --engines pytorch-eager --precision fp32 --vram-limit "$1" --timeout 120 \
          --start-batch "$2" --max-batch "$3"
        [ -n "$final" ] && answer "$final" "$2" "$3"
      done ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  say "$step took $(( SECONDS - t0 )) s"
done
say "used $(gpu_used) MiB; $SECONDS s"
