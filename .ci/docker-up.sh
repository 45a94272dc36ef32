#!/usr/bin/env bash
# Bring up what the Docker-runtime tests need on a CI/dev host, idempotently:
#   1. docker.io (+ docker-compose, debootstrap, docker-registry) installed when absent;
#   2. dockerd running (started as root with --iptables=false when `docker info` fails);
#   3. the local base image kitctl-ci-base:bookworm (no registry is reachable: debootstrap + import;
#      python3 + venv + the C/C++ compiler and Python headers that torch.compile/inductor needs);
#   4. the wheels of the CPU lock in images/pytorch/wheels/ (git-ignored; the CPU build is offline).
#   5. the wheels of the TensorFlow CPU lock in images/tensorflow/wheels/ (likewise).
#   6. Debian trixie's dockerd 26.1 in /opt/kitctl-cdi-dockerd for the CDI request tests (.ci/cdi-dockerd.sh).
#   7. the wheels of the JAX CPU lock in images/jax/wheels/ (likewise).
#   (5b. the loader images' wheels: images/loader-torch, loader-ffcv, loader-dali.)
# Each step is skipped when already done. Env: KITCTL_CI_BASE (image tag), DOCKERD_LOG, DOCKERD_WAIT_S.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_IMAGE="${KITCTL_CI_BASE:-kitctl-ci-base:bookworm}"
DOCKERD_LOG="${DOCKERD_LOG:-/var/log/kitctl-dockerd.log}"
DOCKERD_WAIT_S="${DOCKERD_WAIT_S:-60}"

log() { printf '[docker-up %(%H:%M:%S)T] %s\n' -1 "$*"; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# 1. packages ---------------------------------------------------------------------------------
# docker-registry (Debian's distribution/registry 2.8) is only a binary for the push/pull tests:
# they run `docker-registry serve` on 127.0.0.1:<free port> themselves. Its package would start
# a system service on :5000; a policy-rc.d denies that during the install, and on a systemd
# host the unit is disabled afterwards.
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
[ -x /usr/bin/docker-registry ] || need+=(docker-registry)
if [ "${#need[@]}" -gt 0 ]; then
  log "installing ${need[*]}"
  own_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  if [ -n "$own_policy" ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    $SUDO systemctl disable --now docker-registry.service >/dev/null 2>&1 || true
  fi
fi

# 2. daemon -----------------------------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: $DOCKERD_LOG)"
  # containerd ships with docker.io; dockerd starts its own when none is running.
  $SUDO sh -c "nohup dockerd --iptables=false >>'$DOCKERD_LOG' 2>&1 &"
  waited=0
  until docker info >/dev/null 2>&1; do
    if [ "$waited" -ge "$DOCKERD_WAIT_S" ]; then
      log "dockerd did not answer within ${DOCKERD_WAIT_S}s; last log lines:"
      tail -n 30 "$DOCKERD_LOG" >&2 || true
      exit 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
  log "dockerd answers after ${waited}s"
else
  log "dockerd already answers"
fi

# 3. base image -------------------------------------------------------------------------------
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  log "building $BASE_IMAGE with debootstrap"
  rootfs="$(mktemp -d /tmp/kitctl-rootfs.XXXXXX)"
  trap '$SUDO rm -rf "$rootfs"' EXIT
  $SUDO debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-pip,python3-dev,gcc,g++,libc6-dev,ca-certificates \
    bookworm "$rootfs" ${DEBIAN_MIRROR:+"$DEBIAN_MIRROR"} >/tmp/kitctl-debootstrap.log 2>&1 \
    || { tail -n 30 /tmp/kitctl-debootstrap.log >&2; exit 1; }
  $SUDO rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  $SUDO tar -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$BASE_IMAGE" >/dev/null
  $SUDO rm -rf "$rootfs"
  trap - EXIT
  log "built $BASE_IMAGE"
else
  log "$BASE_IMAGE present"
fi

# 4. the CPU lock's wheels (torch +cpu and its deps), hash-checked, for an offline CPU build ----
"$ROOT/images/pytorch/fetch-cpu-wheels.sh"
# 5. the same for the tensorflow image (tensorflow-cpu and its deps) -------------------------
"$ROOT/images/tensorflow/fetch-cpu-wheels.sh"
# 5b. the loader-torch image's wheels (CPU torch + webdataset), for an offline build ------------
"$ROOT/images/loader-torch/fetch-cpu-wheels.sh"
"$ROOT/images/loader-ffcv/fetch-cpu-wheels.sh"  # builds ffcv from its sdist (needs Debian's OpenCV dev packages)
"$ROOT/images/loader-dali/fetch-cpu-wheels.sh"  # DALI + nvImageCodec (CPU path), hash-checked: ~243 MB
# 6. the engine of the private CDI test daemon (Debian trixie's dockerd 26.1; tests/test_gpu_request.py
#    starts it with .ci/cdi-dockerd.sh and stops it after the session) ------------------------
bash "$ROOT/.ci/cdi-dockerd.sh" fetch
# 7. the same for the jax image (jax/jaxlib CPU, flax, optax and their deps) ------------------
"$ROOT/images/jax/fetch-cpu-wheels.sh"
# 8. Docker Compose v2 and buildx CLI plugins from Debian trixie, not installed (tests/test_compose_v2.py
#    points DOCKER_CONFIG at them; .ci/compose-buildx.sh) ------------------------------------------
bash "$ROOT/.ci/compose-buildx.sh"
log "ready: $(docker version --format 'docker {{.Server.Version}}'), base $BASE_IMAGE"
