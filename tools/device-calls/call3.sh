#!/usr/bin/env bash
# Call 3: Docker setup; a VRAM-gate kill through Docker (release time); throughput eager+cudagraph fp32
# b128 5 runs through Docker and local; the local runtime's bf16 max-batch boundary check.
set -u
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
say setup; bash tools/device-docker-setup.sh pytorch >$OUT/setup3.log 2>&1 || { tail -30 $OUT/setup3.log; echo SETUP FAILED; exit 1; }
grep -E '^step |imported' $OUT/setup3.log
export KITCTL_IMAGE_VARIANT=host-userland
say "gate kill probe: throughput batch 4096 at L=4096 (B=3840, no framework cap in throughput)"
tools/device-kitctl.sh run throughput --runtime docker --engines pytorch-eager --precision fp32 --batch 4096 --runs 1 --warmup-steps 1 --steps 1 --vram-limit 4096 --results-dir /tmp/gate; echo "rc=$?"
say "after gate kill: containers $(kit_containers); used $(gpu_used) MiB"
save /tmp/gate/throughput-*.json
say "throughput docker"
tools/device-kitctl.sh run throughput --runtime docker --engines pytorch-eager,pytorch-cudagraph --precision fp32 --batch 128 --runs 5; echo "rc=$?"
save "$(ls -t results/throughput-*.json | grep -v partial | head -1)"
say "throughput local"
tools/device-kitctl.sh run throughput --runtime local --engines pytorch-eager,pytorch-cudagraph --precision fp32 --batch 128 --runs 5; echo "rc=$?"
save "$(ls -t results/throughput-*.json | grep -v partial | head -1)"
if [ "$SECONDS" -gt 380 ]; then say "no time left for the local bf16 check ($SECONDS s)"; exit 0; fi
say "local bf16 boundary check at the docker run's 17,088 / 17,089"
tools/device-kitctl.sh run maxbatch --runtime local --engines pytorch-eager --precision bf16 --vram-limit 16376 --start-batch 17088 --max-batch 17089; echo "rc=$?"
save "$(ls -t results/maxbatch-*.json | grep -v partial | head -1)"
say "containers at end $(kit_containers); used $(gpu_used) MiB"
