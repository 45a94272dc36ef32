#!/usr/bin/env bash
# A second, private Docker daemon with CDI on, for the tests of kitctl's CDI GPU request
# (tests/test_gpu_request.py). CI's own daemon is Debian 12's docker.io 20.10, which has no CDI;
# this one is Debian trixie's dockerd 26.1 (tools/docker-engine-payload.sh), with
# features.cdi=true and a CDI spec dir holding one spec, kind nvidia.com/gpu, whose device node
# does not exist: every CDI request for it is refused by the daemon itself. One more device of
# that kind, NODELESS_UUID, has no device node at all (only an environment variable): a request
# for it is honoured, so a kit candidate starts "on a GPU" that is not there (the VRAM gate's
# end-to-end test under Docker, tests/test_gate_e2e.py, with a stand-in NVML). It has its own
# socket, data-root, exec-root, pidfile, (managed) containerd and network namespace, no bridge
# and no iptables, so the shared daemon is never touched.
#
#   .ci/cdi-dockerd.sh fetch    download the engine into $DIR (network; skipped when present)
#   .ci/cdi-dockerd.sh start    start it (fetching first if needed), wait until it answers, and
#                               import the stand-in image (a rootfs of /bin/true, labelled as the kit's pytorch image so the label check lets the GPU probe run)
#   .ci/cdi-dockerd.sh stop     stop it (TERM, then KILL after 20 s) and unmount what it left
#   .ci/cdi-dockerd.sh host     print its DOCKER_HOST
#
# Env: KITCTL_CDI_DOCKERD_DIR (default /opt/kitctl-cdi-dockerd), KITCTL_CDI_TEST_ROOT (default
# /run/kitctl-cdi-test: socket, exec-root, pidfile, spec dir, log), KITCTL_CDI_TEST_DATA
# (default /var/lib/kitctl-cdi-test), KITCTL_CDI_WAIT_S (default 60). Needs root.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${KITCTL_CDI_DOCKERD_DIR:-/opt/kitctl-cdi-dockerd}"
RUN="${KITCTL_CDI_TEST_ROOT:-/run/kitctl-cdi-test}"
DATA="${KITCTL_CDI_TEST_DATA:-/var/lib/kitctl-cdi-test}"
WAIT_S="${KITCTL_CDI_WAIT_S:-60}"
SOCK="$RUN/docker.sock"
HOST="unix://$SOCK"
# The names the tests use (tests/test_gpu_request.py reads them from here: keep them in step).
STANDIN_IMAGE="kitctl-cdi-test/true:2"
MISSING_NODE="/dev/kitctl-cdi-test-no-such-gpu"
FAKE_UUID="GPU-cd1cd1cd-0000-4000-8000-000000000000"
NODELESS_UUID="GPU-cd1cd1cd-0000-4000-8000-00000000a11e"

log() { printf '[cdi-dockerd %(%H:%M:%S)T] %s\n' -1 "$*"; }
die() { printf 'cdi-dockerd: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

answers() { [[ -S $SOCK ]] && docker -H "$HOST" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

fetch() {
  if [[ -x $DIR/bin/dockerd && -x $DIR/bin/containerd ]]; then
    log "engine present in $DIR ($("$DIR/bin/dockerd" --version))"
  else
    t=$(now)
    bash "$ROOT/tools/docker-engine-payload.sh" "$DIR"
    log "fetched in $(since "$t") s"
  fi
  # Trixie's binaries that need a newer glibc than this machine's (runc wants 2.38; Debian 12 has
  # 2.36) are dropped: the daemon then takes this machine's own from PATH.
  # (The output is read first: under pipefail, `b --version | grep -q` takes b's failing exit status,
  # and the check never fired — trixie's runc 1.1.15+ds1-2+deb13u1 needs 2.38.)
  local b out
  for b in runc containerd-shim-runc-v2 containerd; do
    [[ -x $DIR/bin/$b ]] || continue
    out=$("$DIR/bin/$b" --version 2>&1 || true)
    if [[ $out == *"GLIBC_"*"not found"* ]]; then
      command -v "$b" >/dev/null || die "$DIR/bin/$b does not run here and there is no $b on PATH"
      log "$b from trixie does not run here ($(head -n1 <<<"$out" | cut -c1-100)); using $(command -v "$b")"
      rm -f "$DIR/bin/$b"
    fi
  done
}

write_spec() {
  mkdir -p "$RUN/cdi"
  # A well-formed spec whose device node is absent: the daemon loads it, resolves the name and
  # fails to inject the node, with its own error.
  cat >"$RUN/cdi/kitctl-test.json" <<EOF
{"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
 "devices": [
  {"name": "0", "containerEdits": {"deviceNodes": [{"path": "$MISSING_NODE"}]}},
  {"name": "$FAKE_UUID", "containerEdits": {"deviceNodes": [{"path": "$MISSING_NODE"}]}},
  {"name": "all", "containerEdits": {"deviceNodes": [{"path": "$MISSING_NODE"}]}}
 ],
 "containerEdits": {}}
EOF
  # The node-less device in a spec file of its own (same kind: the daemon merges them), so a start
  # by an older copy of this script, which rewrites kitctl-test.json only, leaves it in place.
  cat >"$RUN/cdi/kitctl-test-nodeless.json" <<EOF
{"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
 "devices": [
  {"name": "$NODELESS_UUID", "containerEdits": {"env": ["KITCTL_CDI_TEST_GPU=$NODELESS_UUID"]}}
 ]}
EOF
  [[ ! -e $MISSING_NODE ]] || die "$MISSING_NODE exists: the test spec needs a device node that does not"
}

standin_image() {
  # /bin/true and what it links against, as a one-layer image: the refused requests never run
  # it, and the no-GPU control container does.
  docker -H "$HOST" image inspect "$STANDIN_IMAGE" >/dev/null 2>&1 && return 0
  local r t
  r=$(mktemp -d)
  t=$(now)
  mkdir -p "$r/usr/bin"
  cp -L /usr/bin/true "$r/usr/bin/true"
  ldd /usr/bin/true | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | while read -r lib; do
    mkdir -p "$r$(dirname "$lib")"
    cp -L "$lib" "$r$lib"
  done
  [[ -e $r/bin ]] || ln -s usr/bin "$r/bin"
  tar -C "$r" -c . | docker -H "$HOST" import --change 'CMD ["/bin/true"]' \
    --change 'LABEL kit.engine=pytorch kit.trial-protocol=1 kit.stand-in=cdi-test' - "$STANDIN_IMAGE" >/dev/null
  rm -rf "$r"
  log "imported $STANDIN_IMAGE in $(since "$t") s"
}

start() {
  [[ $(id -u) == 0 ]] || die "needs root (it starts a Docker daemon)"
  command -v docker >/dev/null || die "no docker CLI on PATH (.ci/docker-up.sh installs docker.io)"
  command -v unshare >/dev/null || die "no unshare on PATH (util-linux)"
  if answers; then
    log "already answers at $HOST"
    write_spec
    standin_image
    return 0
  fi
  fetch
  write_spec
  mkdir -p "$RUN/exec" "$DATA"
  cat >"$RUN/daemon.json" <<EOF
{"features": {"cdi": true}, "cdi-spec-dirs": ["$RUN/cdi"]}
EOF
  local t waited
  t=$(now)
  # Its own network namespace: a daemon started with --bridge none deletes the host's docker0
  # (moby's removeDefaultBridgeInterface), which the shared daemon's containers and builds need.
  # setsid: the daemon outlives this script (the test session stops it with `stop`).
  PATH="$DIR/bin:$PATH" setsid unshare --net dockerd --config-file "$RUN/daemon.json" --host "$HOST" \
    --data-root "$DATA" --exec-root "$RUN/exec" --pidfile "$RUN/dockerd.pid" \
    --bridge none --iptables=false --ip6tables=false --userland-proxy=false \
    --exec-opt native.cgroupdriver=cgroupfs --cgroup-parent kitctl-cdi-test \
    </dev/null >"$RUN/dockerd.log" 2>&1 &
  waited=0
  until answers; do
    if ! kill -0 $! 2>/dev/null; then
      tail -n 20 "$RUN/dockerd.log" >&2
      die "dockerd exited (log: $RUN/dockerd.log)"
    fi
    if ((waited >= WAIT_S * 5)); then
      tail -n 20 "$RUN/dockerd.log" >&2
      die "dockerd did not answer within ${WAIT_S}s (log: $RUN/dockerd.log)"
    fi
    sleep 0.2
    waited=$((waited + 1))
  done
  log "dockerd $(docker -H "$HOST" version --format '{{.Server.Version}}') answers at $HOST after $(since "$t") s (CDI spec dirs: $(docker -H "$HOST" info --format '{{json .CDISpecDirs}}' 2>/dev/null || echo '?'))"
  standin_image
}

stop() {
  local pid="" t
  [[ -f $RUN/dockerd.pid ]] && pid=$(cat "$RUN/dockerd.pid" 2>/dev/null || true)
  if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then
    log "not running"
  else
    t=$(now)
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "dockerd $pid did not stop in 20 s: KILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped dockerd $pid in $(since "$t") s"
  fi
  # Mounts a killed daemon can leave (overlay layers, its netns files); data-root stays for reuse.
  { grep -E " ($DATA|$RUN)/" /proc/mounts || true; } | awk '{ print $2 }' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -f "$SOCK"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  host) echo "$HOST" ;;
  *) die "usage: $0 fetch|start|stop|host" ;;
esac
