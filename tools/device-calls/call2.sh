#!/usr/bin/env bash
# Call 2: Docker setup; maxbatch pytorch-eager fp32 @16376 through Docker with a kill -9 of kitctl
# mid-candidate, kitctl clean, a SIGINT mid-search, resumes to the end; then bf16 the same way (no faults).
set -u
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
say setup; bash tools/device-docker-setup.sh pytorch >$OUT/setup2.log 2>&1 || { tail -30 $OUT/setup2.log; echo SETUP FAILED; exit 1; }
grep -E '^step |imported' $OUT/setup2.log
export KITCTL_IMAGE_VARIANT=host-userland
say "idle used: $(gpu_used) MiB"; start=$(date +%s)
# $! must be kitctl itself: device-kitctl.sh execs python (no shell function, no subshell)
tools/device-kitctl.sh run maxbatch --runtime docker --engines pytorch-eager --precision fp32 --vram-limit 16376 --timeout 300 & p=$!
sleep 40; say "kill -9 kitctl $p ($(cat /proc/$p/cmdline | tr '\0' ' ' | cut -c1-60))"; kill -9 $p; wait $p; echo "rc=$?"
sleep 2; say "after kill -9: kitctl alive? $(kill -0 $p 2>/dev/null && echo yes || echo no); containers $(kit_containers); used $(gpu_used) MiB"
P=$(newest_partial); echo "partial: $P"
say "kitctl clean"; tools/device-kitctl.sh clean; echo "clean rc=$?"
t0=$(date +%s.%N); for i in $(seq 1 100); do u=$(gpu_used); [ "$u" -lt 64 ] && break; sleep 0.1; done
say "after clean: containers $(kit_containers); used $(gpu_used) MiB (back after $(python3 -c "import time;print(round(time.time()-$t0,2))") s)"
tools/device-kitctl.sh run maxbatch --resume "$P" & p=$!
sleep 25; say "SIGINT kitctl $p"; kill -INT $p; wait $p; echo "rc=$?"
sleep 1; say "after SIGINT: containers $(kit_containers); used $(gpu_used) MiB"
say "resume to the end"; tools/device-kitctl.sh run maxbatch --resume "$P"; echo "rc=$?"
say "fp32 search wall $(( $(date +%s) - start )) s"
F=$(ls -t results/maxbatch-*.json | grep -v partial | head -1); save "$F"
if [ "$SECONDS" -gt 350 ]; then say "no time left for bf16 ($SECONDS s)"; exit 0; fi
say "bf16"; start=$(date +%s)
tools/device-kitctl.sh run maxbatch --runtime docker --engines pytorch-eager --precision bf16 --vram-limit 16376 --timeout 300
echo "rc=$?"; say "bf16 search wall $(( $(date +%s) - start )) s"
F=$(ls -t results/maxbatch-*.json | grep -v partial | head -1); save "$F"; save "$(newest_partial)"
say "containers at end $(kit_containers); used $(gpu_used) MiB"
