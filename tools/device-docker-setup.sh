#!/usr/bin/env bash
# The whole device-side setup of kitctl's Docker runtime on the project's lent GPU machine, in
# ONE call: nothing survives from one lease to the next, and every process the call started dies
# when it returns, so run it at the start of each call that uses `--runtime docker`:
#
#   bash tools/device-docker-setup.sh [pytorch] [opennn] [loader-torch]        (default: pytorch)
#   export KITCTL_IMAGE_VARIANT=host-userland
#   tools/device-kitctl.sh run maxbatch --runtime docker --engines pytorch-eager ...
#
# Steps, each timed (`step NAME: X.Y s`), each failing in one line (`device-docker-setup: …`):
#   wheels   the carried .whl/ into /tmp/site (Docker SDK, jsonschema: tools/device-wheels.sh)
#   engine   .gpu-docker/docker.tar.xz (tools/docker-engine-payload.sh: Debian trixie's dockerd 26.1,
#            containerd, runc, tini) unpacked into /opt/kit-docker
#   cuda     CUDA run once (it creates /dev/nvidia-uvm*, which the CDI spec must list); started in
#            the background first, waited for here
#   cdi      /etc/cdi/nvidia.json from tools/gen-cdi.py: nvidia.com/gpu=<index|UUID|all>
#   daemon   /etc/docker/daemon.json (CDI on, no bridge, no iptables) and dockerd in the background
#   base-*   kitctl/host-userland:runtime (pytorch), :devel (opennn) and :loader-torch (the runtime
#            slice with images/loader-torch's lock: torchvision, pillow too), `docker import` of this
#            machine's own userland slice (tools/host_userland.py; sizes and MiB/s printed)
#   image-*  kitctl images build <service> --variant host-userland --network none
#   doctor   kitctl doctor: which GPU request works here (CDI), the images, the GPU idle
#
# loader-torch also needs images/loader-torch/wheels/ with requirements-host-userland.txt's wheels (webdataset,
# braceexpand, pyyaml for Python 3.12: images/loader-torch/fetch-host-userland-wheels.sh where an index is
# reachable), carried.
# opennn also needs the OpenNN sources: .opennn-src/ (tools/opennn-sources-here.sh), or
# .gpu-docker/opennn-src.tar.xz, which is unpacked into it (carry .gpu-docker only: smaller).
# --dry-run (any machine, no GPU, no daemon): checks the carried inputs and prints each base's
# slice and size (host_userland.py plan). Env: KIT_PAYLOAD, KIT_DOCKER_DIR (/opt/kit-docker),
# KIT_HOST_VENV (/opt/torch/.venv), KIT_DOCKERD_WAIT_S (60).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PAYLOAD=${KIT_PAYLOAD:-.gpu-docker/docker.tar.xz}
OPENNN_TARBALL=.gpu-docker/opennn-src.tar.xz
DOCKER_DIR=${KIT_DOCKER_DIR:-/opt/kit-docker}
VENV=${KIT_HOST_VENV:-/opt/torch/.venv}
WAIT_S=${KIT_DOCKERD_WAIT_S:-60}
SOCK=/var/run/docker.sock
LOGS=/tmp/kit-setup
VARIANT=host-userland

die() { printf 'device-docker-setup: %s\n' "$*" >&2; exit 1; }
note() { printf 'device-docker-setup: %s\n' "$*"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
T0=$(now)
step() { # NAME FUNCTION [ARGS...]: run it, print its time
  local name=$1 t
  shift
  t=$(now)
  "$@"
  printf 'step %s: %s s\n' "$name" "$(secs "$t" "$(now)")"
}
kitctl() { PYTHONPATH="$REPO/host:/tmp/site" PYTHONUNBUFFERED=1 python3 -c 'from kitctl.cli import main; main()' "$@"; }

dry=0
want=()
for a in "$@"; do
  case $a in
    --dry-run) dry=1 ;;
    pytorch | opennn | loader-torch) want+=("$a") ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    *) die "unknown argument '$a' (pytorch, opennn, loader-torch, --dry-run)" ;;
  esac
done
((${#want[@]})) || want=(pytorch)
has() { local w; for w in "${want[@]}"; do [[ $w == "$1" ]] && return 0; done; return 1; }
mkdir -p "$LOGS"

# ---- inputs, before anything slow: fail fast --------------------------------------------------
check_inputs() {
  [[ -f $PAYLOAD ]] || die "no engine payload at $PAYLOAD: make it with tools/docker-engine-payload.sh $PAYLOAD and carry $(dirname "$PAYLOAD")"
  compgen -G ".whl/*.whl" >/dev/null || die "no wheels in .whl/: make them with tools/device-wheels.sh and carry .whl"
  local w
  for w in docker jsonschema referencing rpds_py; do
    compgen -G ".whl/$w-*.whl" >/dev/null || die "no $w wheel in .whl/ (tools/device-wheels.sh)"
  done
  [[ -f tools/gen-cdi.py && -f tools/host_userland.py ]] || die "tools/gen-cdi.py or tools/host_userland.py missing"
  if has opennn && [[ ! -d .opennn-src/opennn ]]; then
    [[ -f $OPENNN_TARBALL ]] || die "opennn needs its sources: .opennn-src/ (tools/opennn-sources-here.sh) or $OPENNN_TARBALL, carried"
  fi
  if has loader-torch && ! compgen -G "images/loader-torch/wheels/webdataset-*.whl" >/dev/null; then
    die "loader-torch needs images/loader-torch/wheels/ (images/loader-torch/fetch-host-userland-wheels.sh), carried"
  fi
  [[ -d $VENV/bin ]] || die "no venv at $VENV (KIT_HOST_VENV): the host-userland base takes the framework from it"
  note "inputs: $PAYLOAD ($(du -h "$PAYLOAD" | cut -f1)), $(find .whl -maxdepth 1 -type f -name '*.whl' | wc -l) wheels, images: ${want[*]}"
}

if ((dry)); then
  step inputs check_inputs
  local_list=$(tar -tJf "$PAYLOAD") || die "$PAYLOAD is not a readable .tar.xz"
  grep -qE '^(\./)?bin/dockerd$' <<<"$local_list" || die "$PAYLOAD holds no bin/dockerd"
  note "payload: $(grep -E '^(\./)?bin/.' <<<"$local_list" | sed 's|^\./||' | tr '\n' ' ')"
  has pytorch && step plan-runtime python3 tools/host_userland.py plan --profile runtime --venv "$VENV"
  has opennn && step plan-devel python3 tools/host_userland.py plan --profile devel --venv "$VENV"
  note "dry run: nothing started; $(secs "$T0" "$(now)") s"
  exit 0
fi

[[ $(id -u) == 0 ]] || die "run it as root (it starts dockerd and writes /etc/docker, /etc/cdi)"
case $(uname -r) in
  4.4.0*) die "this kernel reports 4.4.0 (gVisor): dockerd needs a real kernel; ask for a Firecracker machine" ;;
esac
check_inputs

# CUDA first, in the background: the rest does not need it until the CDI spec.
python3 -c 'import torch; torch.zeros(1).cuda(); print("cuda:", torch.cuda.get_device_name(0), torch.__version__)' \
  >"$LOGS/cuda.log" 2>&1 &
CUDA_PID=$!
CUDA_T0=$(now)

wheels() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$LOGS/pip.log" 2>&1 || { tail -n 5 "$LOGS/pip.log" >&2; die "installing .whl/ into /tmp/site failed"; }
  PYTHONPATH=/tmp/site python3 -c 'import docker, jsonschema, yaml, typer, rich' 2>"$LOGS/import.log" ||
    die "after the wheels, python3 still cannot import what kitctl needs: $(tail -n 1 "$LOGS/import.log")"
}

engine() {
  if [[ ! -x $DOCKER_DIR/bin/dockerd ]]; then
    mkdir -p "$DOCKER_DIR"
    tar -C "$DOCKER_DIR" -xJf "$PAYLOAD" || die "unpacking $PAYLOAD into $DOCKER_DIR failed"
  fi
  export PATH="$DOCKER_DIR/bin:$PATH"
  local b
  for b in dockerd containerd runc; do
    "$b" --version >/dev/null 2>"$LOGS/$b.version" || die "$DOCKER_DIR/bin/$b does not run here: $(head -c 200 "$LOGS/$b.version")"
  done
  note "engine: $(dockerd --version), $(runc --version | head -n1) ($(tr '\n' ' ' <"$DOCKER_DIR/PACKAGES"))"
}

cuda_wait() {
  wait "$CUDA_PID" || die "CUDA did not start on the host: $(tail -n 1 "$LOGS/cuda.log")"
  note "$(tail -n 1 "$LOGS/cuda.log") (took $(secs "$CUDA_T0" "$(now)") s from the start, in the background)"
  [[ -e /dev/nvidia-uvm ]] || note "warning: no /dev/nvidia-uvm after CUDA ran: the spec will lack it"
}

cdi() {
  command -v nvidia-smi >/dev/null || die "no nvidia-smi on PATH: tools/gen-cdi.py asks it for the GPUs"
  mkdir -p /etc/cdi
  python3 tools/gen-cdi.py >/etc/cdi/nvidia.json.tmp 2>"$LOGS/gen-cdi.log" ||
    die "tools/gen-cdi.py failed: $(tail -n 1 "$LOGS/gen-cdi.log")"
  mv /etc/cdi/nvidia.json.tmp /etc/cdi/nvidia.json
  python3 - <<'EOF' || die "/etc/cdi/nvidia.json is not a usable spec"
import json
s = json.load(open("/etc/cdi/nvidia.json"))
names = [d["name"] for d in s["devices"]]
edits = s.get("containerEdits") or {}
assert s["kind"] == "nvidia.com/gpu" and names, "no devices"
print(f"device-docker-setup: CDI spec /etc/cdi/nvidia.json: nvidia.com/gpu={','.join(names)}; "
      f"{len(edits.get('deviceNodes') or [])} common device nodes, {len(edits.get('mounts') or [])} driver mounts")
EOF
}

daemon() {
  mkdir -p /etc/docker
  # CDI on (Docker < 28.2 needs it said); no bridge, no iptables, no docker-proxy: the machine has
  # neither iptables nor ip, and containers run with network "none" anyway.
  cat >/etc/docker/daemon.json <<'EOF'
{"features": {"cdi": true}, "cdi-spec-dirs": ["/etc/cdi"], "iptables": false, "ip6tables": false,
 "userland-proxy": false, "bridge": "none", "exec-opts": ["native.cgroupdriver=cgroupfs"],
 "storage-driver": "overlay2"}
EOF
  if PYTHONPATH=/tmp/site python3 -c "import docker; docker.DockerClient(base_url='unix://$SOCK', timeout=3).ping()" 2>/dev/null; then
    note "a Docker daemon already answers at $SOCK: used as it is (its CDI spec dirs must include /etc/cdi)"
    return 0
  fi
  rm -f /var/run/docker.pid
  # In the background, not setsid: it lives until this call returns, which is what the runs need.
  nohup dockerd >"$LOGS/dockerd.log" 2>&1 </dev/null &
  local pid=$!
  PYTHONPATH=/tmp/site python3 - "$SOCK" "$pid" "$WAIT_S" <<'EOF' || { tail -n 15 "$LOGS/dockerd.log" >&2; die "dockerd did not come up (log: $LOGS/dockerd.log)"; }
import os, sys, time
import docker
sock, pid, wait_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
t0 = time.monotonic()
while True:
    try:
        c = docker.DockerClient(base_url=f"unix://{sock}", timeout=5)
        c.ping()
        break
    except Exception as exc:  # noqa: BLE001
        if not os.path.exists(f"/proc/{pid}"):
            sys.exit(f"device-docker-setup: dockerd exited ({type(exc).__name__})")
        if time.monotonic() - t0 > wait_s:
            sys.exit(f"device-docker-setup: dockerd did not answer within {wait_s:.0f} s")
        time.sleep(0.1)
v, info = c.version(), c.info()
print(f"device-docker-setup: dockerd {v['Version']} (API {v['ApiVersion']}) answers after {time.monotonic() - t0:.1f} s; "
      f"storage {info.get('Driver')}, cgroup v{info.get('CgroupVersion')}, CDI spec dirs {info.get('CDISpecDirs')}, "
      f"data root {info.get('DockerRootDir')}")
if "/etc/cdi" not in (info.get("CDISpecDirs") or []):
    sys.exit("device-docker-setup: the daemon does not read /etc/cdi (CDISpecDirs): CDI is off")
EOF
}

base() { # PROFILE [TAG LOCK]
  local tag=${2:-$1}
  PYTHONPATH=/tmp/site python3 tools/host_userland.py import --profile "$1" --venv "$VENV" \
    --tag "kitctl/host-userland:$tag" ${3:+--lock "$3"} || die "importing kitctl/host-userland:$tag failed (above)"
}

opennn_sources() {
  if [[ ! -d .opennn-src/opennn ]]; then
    mkdir -p .opennn-src
    tar -C .opennn-src -xJf "$OPENNN_TARBALL" || die "unpacking $OPENNN_TARBALL failed"
    note "OpenNN sources unpacked from $OPENNN_TARBALL: $(du -sh .opennn-src | cut -f1)"
  fi
}

image() { # SERVICE
  kitctl images build "$1" --variant "$VARIANT" --network none --tail 30 ||
    die "building the $1 image (variant $VARIANT) failed (above)"
}

doctor() {
  local rc=0
  KITCTL_IMAGE_VARIANT=$VARIANT kitctl doctor --json >"$LOGS/doctor.json" 2>"$LOGS/doctor.err" || rc=$?
  python3 - "$LOGS/doctor.json" <<'EOF' || die "kitctl doctor: the daemon cannot attach the GPU (above)"
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit("device-docker-setup: kitctl doctor printed no JSON")
for c in doc["checks"]:
    mark = {"ok": "ok  ", "error": "FAIL"}.get(c["level"], c["level"])
    print(f"  doctor {mark} {c['name']}: {c['detail'][:400]}")
gpu = next((c for c in doc["checks"] if c["name"] == "nvidia-runtime"), None)
sys.exit(0 if gpu and gpu["level"] == "ok" else 1)
EOF
  note "kitctl doctor exit $rc (1 is fine when only a warning, e.g. the GPU not idle, stands in the way)"
}

step wheels wheels
step engine engine
step cuda cuda_wait
step cdi cdi
step daemon daemon
if has pytorch; then step base-runtime base runtime; fi
if has opennn; then step opennn-sources opennn_sources; step base-devel base devel; fi
if has loader-torch; then
  step base-loader-torch base runtime loader-torch images/loader-torch/requirements-cuda.lock
fi
if has pytorch; then step image-pytorch image pytorch; fi
if has opennn; then step image-opennn image opennn; fi
if has loader-torch; then step image-loader-torch image loader-torch; fi
# doctor probes the GPU request with an engine image; a loader image alone is probed by `kitctl run dataload` itself
if has pytorch || has opennn; then step doctor doctor; fi
df -h /var/lib/docker 2>/dev/null | tail -n 1 | awk '{ print "device-docker-setup: disk at /var/lib/docker: " $4 " free of " $2 }'
note "ready in $(secs "$T0" "$(now)") s: dockerd runs until this call ends (log $LOGS/dockerd.log)."
note "next, in the same call: export KITCTL_IMAGE_VARIANT=$VARIANT; tools/device-kitctl.sh run maxbatch --runtime docker ..."
