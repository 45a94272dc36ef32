#!/usr/bin/env bash
# jax-xla fp32 with --slots auto on the H200, in one call (nvidia-h200, carry [".whl"]; stamp first):
#   CALL_LIMIT_S=585 bash tools/device-calls/call-slots-jax.sh 2>&1 | tee $OUT/slots-jax.log
# The committed one-slot search's settings (results/reference/maxbatch-resnet50-synthetic-20261201T163217Z.json:
# 13,568/13,569, guided, from 12,288, 18 candidates, 879 s of candidate time) with --slots auto (SLOTS= to change).
# A run cut by the call's limit keeps its partial (copied to $OUT): `--resume` it on another machine with --gpu 0.
set -u
LIMIT=${CALL_LIMIT_S:-585}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
python3 -c "import jax; print('jax', jax.__version__)"
say "jax-xla fp32 at 16,376 MiB, --slots ${SLOTS:-auto} (left $(left) s); used $(gpu_used) MiB"
t0=$SECONDS
timeout -s INT $(( $(left) - 10 )) tools/device-kitctl.sh run maxbatch --runtime local --engines jax-xla \
  --precision fp32 --vram-limit 16376 --strategy guided --timeout 150 --start-batch 12288 --slots "${SLOTS:-auto}" \
  2>&1 | grep -v '…$'; echo "rc=${PIPESTATUS[0]}"
say "took $(( SECONDS - t0 )) s"
final="$(ls -t results/maxbatch-*.json 2>/dev/null | grep -v partial | head -1)"
save "$final"; save "$(newest_partial)"
[ -n "$final" ] && python3 - "$final" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
print("slots:", doc.get("slots"))
for c in doc["results"]:
    got = (c["max_batch"], c["next_batch"])
    print(f"{c['engine']} {c['precision']}: {got} (committed (13568, 13569): {'SAME' if got == (13568, 13569) else 'DIFFERENT'}); "
          f"{len(c['trials'])} candidates, {len(c.get('cancelled', []))} cancelled; wall {c.get('slots_wall_s')} s")
EOF
say "used $(gpu_used) MiB; $SECONDS s"
