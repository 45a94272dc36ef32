#!/usr/bin/env bash
# Call 4 (issue 15's last run, issue 16's OpenNN throughput): Docker setup with the OpenNN
# host-userland image; opennn-pool1 fp32 @16376 through Docker at the local boundary 7,285/7,286;
# then opennn-graph throughput through Docker, fp32 and bf16, 6 runs each (time permitting).
# Carry [".gpu-docker", ".whl"] with .gpu-docker/opennn-src.tar.xz (tar -C .opennn-src -cJf ... .).
set -u
LIMIT=${CALL_LIMIT_S:-570}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
say setup; bash tools/device-docker-setup.sh opennn >$OUT/setup4.log 2>&1 || { tail -40 $OUT/setup4.log; echo SETUP FAILED; exit 1; }
grep -E '^step |imported|device-docker-setup: (ready|dockerd)' $OUT/setup4.log
export KITCTL_IMAGE_VARIANT=host-userland
say "opennn-pool1 fp32 @16376 docker at 7285/7286 (left $(left) s)"
timeout -s INT $(( $(left) - 5 )) tools/device-kitctl.sh run maxbatch --runtime docker --engines opennn-pool1 --precision fp32 --vram-limit 16376 --start-batch 7285 --max-batch 7286 --timeout 240; echo "rc=$?"
save "$(ls -t results/maxbatch-*.json | grep -v partial | head -1)"; save "$(newest_partial)"
say "containers $(kit_containers); used $(gpu_used) MiB"
if [ "$(left)" -lt 90 ]; then say "no time left for opennn-graph throughput"; exit 0; fi
say "opennn-graph throughput docker both precisions, 6 runs (left $(left) s)"
timeout -s INT $(( $(left) - 5 )) tools/device-kitctl.sh run throughput --runtime docker --engines opennn-graph --precision both --batch 128 --warmup-steps 390 --steps 780 --runs 6; echo "rc=$?"
save "$(ls -t results/throughput-*.json | grep -v partial | head -1)"; save "$(newest_partial)"
say "containers at end $(kit_containers); used $(gpu_used) MiB; $SECONDS s"
