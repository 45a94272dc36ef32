# Shared by the call scripts (sourced). Runs on the GPU machine.
# Used by the 2026-12-01 H200 Docker runs (results/reference/logs/h200-docker-call*.log): run from the repo root on
# the GPU machine with carry [".gpu-docker", ".whl"]:  bash tools/device-calls/call2.sh 2>&1 | tee $OUT/call2.log
export PYTHONUNBUFFERED=1
K() { tools/device-kitctl.sh "$@"; }
ts() { date -u +%H:%M:%S; }
say() { echo "[$(ts)] == $*"; }
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
kit_containers() { PYTHONPATH=/tmp/site python3 -c 'import docker; c=docker.from_env(); l=c.containers.list(all=True, filters={"label":"kit.run-id"}); print(len(l), [x.name+":"+x.status for x in l])'; }
newest_partial() { ls -t results/*.partial.json 2>/dev/null | head -1; }
save() { for f in "$@"; do [ -f "$f" ] && cp "$f" "$OUT/" && echo "saved $f"; done; }
# Seconds left of the call's own limit (LIMIT, set by the call script before sourcing; default 575).
left() { echo $(( ${LIMIT:-575} - SECONDS )); }
# The data calls' set-up (carry ".whl-data": tools/build-ffcv-wheel.sh): its wheels into /tmp/site, the corpus's
# photographs, and the X11 libraries OpenCV needs where the machine lacks them.
data_setup() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl-data/*.whl || { echo "pip install of .whl-data failed"; return 2; }
  export PYTHONPATH=/tmp/site
  export KITCTL_CORPUS_SOURCES=$PWD/.whl-data/skimage-data
  ldconfig -p | grep -q 'libX11.so.6 ' || export LD_LIBRARY_PATH=$PWD/.whl-data/syslibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}
