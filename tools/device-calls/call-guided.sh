#!/usr/bin/env bash
# Issue 19: --strategy guided on the H200, PyTorch eager fp32, local runtime, beside the committed
# protocol runs (results/reference/maxbatch-resnet50-synthetic-20261129T195932Z.json at 16,376 MiB: 21
# candidates, 232 s; …20261129T200326Z on the whole card: 27 candidates, 365 s). One search per
# call (the whole card may need most of a 10-minute call); a cut-off run leaves its partial in
# $OUT, resumable with --resume in the next call:
#   bash tools/device-calls/call-guided.sh 16k  2>&1 | tee $OUT/guided-16k.log     (carry [".whl"])
#   bash tools/device-calls/call-guided.sh card 2>&1 | tee $OUT/guided-card.log
set -u
LIMIT=${CALL_LIMIT_S:-570}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
case "${1:-}" in
  16k) limit=(--vram-limit 16376 --timeout 120) ;;
  card) limit=(--timeout 180) ;;
  *) echo "usage: $0 16k|card"; exit 2 ;;
esac
say "guided pytorch-eager fp32 ${1} (left $(left) s); used $(gpu_used) MiB"
timeout -s INT $(( $(left) - 5 )) tools/device-kitctl.sh run maxbatch --runtime local --engines pytorch-eager \
  --precision fp32 "${limit[@]}" --strategy guided; echo "rc=$?"
save "$(ls -t results/maxbatch-*.json | grep -v partial | head -1)"; save "$(newest_partial)"
say "used $(gpu_used) MiB; $SECONDS s"
