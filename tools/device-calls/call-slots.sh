#!/usr/bin/env bash
# --slots on the H200, in one call (nvidia-h200, carry [".whl"]: tools/device-wheels.sh here first,
# then tools/device-kitctl.sh --stamp): PyTorch eager fp32 and bf16 at 16,376 MiB, local runtime,
# --slots auto (the card's 143,771 MiB hold 8 × (16,376 + 512)), beside the committed sequential
# searches at the same settings (results/reference/maxbatch-resnet50-synthetic-20261129T195932Z.json:
# fp32 8,832/8,833, 21 candidates, 232 s; …20261201T035836Z.json: bf16 17,088/17,089, 23 candidates).
#   bash tools/device-calls/call-slots.sh 2>&1 | tee $OUT/slots.log
# Prints per cell the answer against the committed pair, the slots, the per-slot gate's offset and the
# search's wall time from its first candidate to its answer (slots_wall_s); the artifact goes to $OUT.
set -u
LIMIT=${CALL_LIMIT_S:-575}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
say "pytorch-eager fp32+bf16 at 16,376 MiB, --slots auto (left $(left) s); used $(gpu_used) MiB"
t0=$SECONDS
timeout -s INT $(( $(left) - 10 )) tools/device-kitctl.sh run maxbatch --runtime local --engines pytorch-eager \
  --precision both --vram-limit 16376 --timeout 120 --slots auto 2>&1 | grep -v '…$'; echo "rc=${PIPESTATUS[0]}"
say "took $(( SECONDS - t0 )) s"
final="$(ls -t results/maxbatch-*.json 2>/dev/null | grep -v partial | head -1)"
save "$final"; save "$(newest_partial)"
[ -n "$final" ] && python3 - "$final" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
want = {"fp32": (8832, 8833), "bf16": (17088, 17089)}
print("slots:", doc.get("slots"))
for c in doc["results"]:
    got = (c["max_batch"], c["next_batch"])
    print(f"{c['engine']} {c['precision']}: {got} (committed {want.get(c['precision'])}: "
          f"{'SAME' if got == want.get(c['precision']) else 'DIFFERENT'}); {len(c['trials'])} candidates, "
          f"{len(c.get('cancelled', []))} cancelled; gate {c.get('slot_gate')}; wall {c.get('slots_wall_s')} s")
EOF
# The bf16 pair again by a sequential search with this code (VERIFY=0 skips): the committed bf16 references
# predate the framework's 64 MiB slack, so their allocator cap was 64 MiB larger; this checks the slots' bf16
# answer against a sequential search under the same cap.
if [ "${VERIFY:-1}" = 1 ] && [ -n "$final" ] && (( $(left) > 150 )); then
  pair=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(*[f\"{c['max_batch']} {c['next_batch']}\" for c in d['results'] if c['precision']=='bf16'])" "$final")
  if [ -n "$pair" ]; then
    set -- $pair
    say "bf16 sequential check of $1/$2 (left $(left) s)"
    timeout -s INT $(( $(left) - 120 )) tools/device-kitctl.sh run maxbatch --runtime local --engines pytorch-eager \
      --precision bf16 --vram-limit 16376 --timeout 120 --start-batch "$1" --max-batch "$2" 2>&1 | grep -v '…$'
    echo "rc=${PIPESTATUS[0]}"
    save "$(ls -t results/maxbatch-*.json 2>/dev/null | grep -v partial | head -1)"
  fi
fi
# The peers on the same question and cap, in the same call (PEERS=0 skips): Lightning's binsearch with its
# defaults and with max_val 65536 / margin 0, accelerate's finder from 16,384; each finder a fresh process under
# the allocator fraction the committed sequential fp32 search's candidates ran under.
if [ "${PEERS:-1}" = 1 ] && (( $(left) > 150 )); then
  ref=results/reference/maxbatch-resnet50-synthetic-20261129T195932Z.json
  say "peers, fp32, the cap of $ref (left $(left) s)"
  timeout $(( $(left) - 60 )) python3 tools/peer_batch_finders.py --like "$ref" --engine pytorch-eager --precision fp32 \
    --lightning-max-val 65536 --lightning-margin 0 --out "$OUT/peers-fp32-max65536-margin0.json" | tail -3
  (( $(left) > 60 )) && timeout $(( $(left) - 20 )) python3 tools/peer_batch_finders.py --like "$ref" \
    --engine pytorch-eager --precision fp32 --finders lightning --out "$OUT/peers-fp32-lightning-defaults.json" | tail -3
fi
say "used $(gpu_used) MiB; $SECONDS s"
