#!/usr/bin/env bash
# Opt-in CI step (minutes: two builds of the CPU torch image from a clean cache on top of the test
# suite's): `kitctl images build --check-reproducible` for the CPU images named (default: pytorch),
# each built twice with --no-cache, SOURCE_DATE_EPOCH (default: the last commit's time) and the
# classic builder's timestamps rewritten; exit 1 and the differing layers/files when the two IDs
# differ. The images are built under their own names (a KITCTL_HOME whose compose.yaml renames the
# cpu-ci builds to kitctl-repro/...), never over the shared kitctl/*:ci images, and removed after.
#   .ci/check-reproducible.sh [SERVICE...]      env: SOURCE_DATE_EPOCH, KITCTL_CHECK_LOG
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
services=("$@"); [[ ${#services[@]} -gt 0 ]] || services=(pytorch)
# The build context is the home: hard links of images/ and trials/ (a symlink would not be sent to
# the daemon), under build/ (git-ignored, on the checkout's file system).
mkdir -p "$ROOT/build"
home=$(mktemp -d "$ROOT/build/repro-home.XXXXXX")
cleanup() {
  for s in "${services[@]}"; do docker image rm -f "kitctl-repro/$s:ci" >/dev/null 2>&1 || true; done
  rm -rf "$home"
}
trap cleanup EXIT
cp -al "$ROOT/trials" "$ROOT/images" "$ROOT/.dockerignore" "$home/"
find "$home" -name __pycache__ -prune -exec rm -rf {} +
sed -E 's#^( +image: )kitctl/([a-z-]+):ci$#\1kitctl-repro/\2:ci#' "$ROOT/compose.yaml" > "$home/compose.yaml"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct)}"
log="${KITCTL_CHECK_LOG:-/dev/null}"
t0=$(date +%s)
KITCTL_HOME="$home" PYTHONPATH="$ROOT/host${PYTHONPATH:+:$PYTHONPATH}" KITCTL_COMPOSE="${KITCTL_COMPOSE:-auto}" \
  python3 -c "from kitctl.cli import main; main()" images build "${services[@]}" --variant cpu-ci \
  --check-reproducible 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
echo "check-reproducible: ${services[*]}: exit $rc in $(( $(date +%s) - t0 )) s (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)" | tee -a "$log"
exit "$rc"
