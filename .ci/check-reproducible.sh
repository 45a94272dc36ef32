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
home=$(mktemp -d /tmp/kitctl-repro-home.XXXXXX)
cleanup() {
  for s in "${services[@]}"; do docker image rm -f "kitctl-repro/$s:ci" >/dev/null 2>&1 || true; done
  rm -rf "$home"
}
trap cleanup EXIT
ln -s "$ROOT/trials" "$home/trials"; ln -s "$ROOT/images" "$home/images"
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
