#!/usr/bin/env bash
# Issue 19 item 2 on the 2-GPU kind (nvidia-h200-x2, carry [".whl"]): PyTorch eager fp32 + bf16 at 16,376 MiB,
# local runtime, on one GPU and on two (cells side by side; a GPU left without a cell joins the other cell's
# search with speculative candidates). Same answers expected; the issue's target is a wall-time ratio ≤ 0.55.
# The one-GPU run is ~21 + ~23 candidates (the committed single-cell runs: 232 s fp32 at 16,376 MiB, bf16
# through Docker 23 candidates) — about 8 minutes, so each side is a call of its own on the warm machine:
#   bash tools/device-calls/call-gpus2.sh one 2>&1 | tee $OUT/gpus2-one.log
#   bash tools/device-calls/call-gpus2.sh two 2>&1 | tee $OUT/gpus2-two.log
# (the wall time of each run is in its artifact: created_utc .. finished_utc; the log has SECONDS too).
set -u
LIMIT=${CALL_LIMIT_S:-570}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
case "${1:-}" in
  one) where=(--gpu 0) ;;
  two) where=(--gpus 0,1) ;;
  *) echo "usage: $0 one|two"; exit 2 ;;
esac
say "pytorch-eager fp32+bf16 at 16,376 MiB on ${where[*]} (left $(left) s); used $(gpu_used) MiB"
t0=$SECONDS
timeout -s INT $(( $(left) - 5 )) tools/device-kitctl.sh run maxbatch --runtime local --engines pytorch-eager \
  --precision both --vram-limit 16376 --timeout 120 "${where[@]}"; echo "rc=$?"
say "${1} took $(( SECONDS - t0 )) s"
save "$(ls -t results/maxbatch-*.json | grep -v partial | head -1)"; save "$(newest_partial)"
