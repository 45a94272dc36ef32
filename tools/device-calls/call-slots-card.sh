#!/usr/bin/env bash
# The --slots cells that are still missing, by the card the call got (carry [".whl", ".opennn-src"]; stamp first):
#   CALL_LIMIT_S=580 bash tools/device-calls/call-slots-card.sh 2>&1 | tee $OUT/slots-card.log
# On an H200: pytorch-eager fp32 and bf16 with --slots auto --prestart beside Lightning's and accelerate's finders
# (call-slots-engines.sh pytorch), then the six-size catalogue with the fork server (call-catalogue.sh PRESTART=1), then
# the host's CPU capacity over PROBE_S seconds (tools/cpu_probe.py; default 90) when time is left.
# On any other card (its PyTorch and catalogue figures are committed): opennn-pool1 then jax-xla
# (call-slots-engines.sh opennn jax). STEPS= overrides the choice. Every artifact ends in $OUT/artifacts.tgz (the
# call's output keeps at most 8 files), written again after each step so a cut call keeps what finished.
set -u
LIMIT=${CALL_LIMIT_S:-580}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if [ -z "${STEPS:-}" ]; then
  case "$card" in *H200*) STEPS="pytorch catalogue probe" ;; *) STEPS="opennn jax" ;; esac
fi
say "card: $card; steps: $STEPS"
pack() {  # every artifact, partial and peers file written so far moves into one archive beside the logs
  mkdir -p /tmp/kit-artifacts
  find "$OUT" -maxdepth 2 -name '*.json' -exec mv -t /tmp/kit-artifacts {} +
  tar czf "$OUT/artifacts.tgz" -C /tmp/kit-artifacts . && say "artifacts.tgz: $(ls /tmp/kit-artifacts | tr '\n' ' ')"
}
for step in $STEPS; do
  (( $(left) > 60 )) || { say "no time left for $step"; continue; }
  case "$step" in
    probe)  # the host's CPU capacity over PROBE_S seconds (tools/cpu_probe.py): data steadiness's yardstick
      (( $(left) > ${PROBE_S:-90} + 20 )) || { say "probe skipped (left $(left) s)"; continue; }
      say "tools/cpu_probe.py --seconds ${PROBE_S:-90} (left $(left) s)"
      python3 tools/cpu_probe.py --seconds "${PROBE_S:-90}" --out "$OUT/probe.json" > /dev/null
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); p=d['probe']; print({k: p[k] for k in sorted(p) if not isinstance(p[k], list)})" "$OUT/probe.json" ;;
    catalogue) PRESTART=1 CALL_LIMIT_S=$(left) bash tools/device-calls/call-catalogue.sh 2>&1 | tee "$OUT/catalogue.log" ;;
    *) CALL_LIMIT_S=$(left) bash tools/device-calls/call-slots-engines.sh "$step" 2>&1 | tee "$OUT/slots-$step.log" ;;
  esac
  pack
done
say "done in $SECONDS s"
