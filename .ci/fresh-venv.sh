#!/usr/bin/env bash
# A new user's first minutes, in CI: README's install in a fresh virtual environment WITHOUT the
# system's site-packages, so the CLI gets only what pyproject.toml declares (the CI machine's
# Python has more, e.g. click, which once hid an undeclared import). Then, each of which must
# hold or CI fails:
#   kitctl --help                        exit 0
#   kitctl run maxbatch --engines nope   exit 2, exactly one line on stderr, nothing written
#   kitctl doctor                        any exit code (no GPU here), but no traceback
#   a tiny CPU search (one candidate)    exit 0 and its artifact exists (and `kitctl report` reads it)
#   deptry                               every third-party module the host imports is declared
# README's install is `python3 -m pip install -e . torch numpy`; torch is pinned here to the
# CPU build the CI machine has on disk (KITCTL_CI_TORCH overrides the requirement).
#   bash .ci/fresh-venv.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
t0=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/kitctl-fresh-venv.XXXXXX")
trap 'rm -rf "$work"' EXIT

say() { printf 'fresh-venv [%3ds]: %s\n' "$(( $(date +%s) - t0 ))" "$*"; }
fail() { printf 'fresh-venv: FAIL: %s\n' "$*" >&2; exit 1; }
no_traceback() { # label file
  if grep -q 'Traceback' "$2"; then sed 's/^/  | /' "$2" >&2; fail "$1 printed a traceback"; fi
}

python3 -m venv "$work/venv" || fail "python3 -m venv failed (Debian: apt-get install python3-venv)"
grep -qx 'include-system-site-packages = false' "$work/venv/pyvenv.cfg" ||
  fail "the venv sees the system site-packages"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
[[ $(command -v python3) == "$work/venv/bin/python3" ]] || fail "python3 is not the venv's"
say "installing: python3 -m pip install -e . ${KITCTL_CI_TORCH:-torch==2.13.0} numpy"
# --no-compile: the same files, minus compiling torch's thousands of modules up front (minutes here).
python3 -m pip install -q --disable-pip-version-check --no-compile -e . "${KITCTL_CI_TORCH:-torch==2.13.0}" numpy \
  2> >(grep -v "^WARNING: Location '" >&2) || fail "README's install failed"
say "installed: $(python3 -m pip list --disable-pip-version-check 2>/dev/null |
  awk '$1 ~ /^(typer|click|rich|docker|jsonschema|requests|torch)$/ {printf "%s %s, ", $1, $2}')"
[[ $(command -v kitctl) == "$work/venv/bin/kitctl" ]] || fail "kitctl is not the venv's entry point"
cd "$work"  # not the checkout: the installed package, not ./host, must be what runs

rc=0; kitctl --help >help.out 2>&1 || rc=$?
no_traceback "kitctl --help" help.out
[[ $rc -eq 0 ]] || { cat help.out >&2; fail "kitctl --help exited $rc"; }
say "kitctl --help: ok"

rc=0; kitctl run maxbatch --engines nope --results-dir "$work/refused" >bad.out 2>bad.err || rc=$?
no_traceback "a refused run" bad.err
[[ $rc -eq 2 ]] || { cat bad.out bad.err >&2; fail "--engines nope exited $rc, not 2"; }
[[ $(wc -l <bad.err) -eq 1 ]] || { cat bad.err >&2; fail "--engines nope printed $(wc -l <bad.err) lines on stderr, not 1"; }
[[ ! -e $work/refused ]] || fail "a refused run wrote $work/refused"
say "bad input refused: $(cat bad.err)"

rc=0; kitctl doctor >doctor.out 2>&1 || rc=$?
no_traceback "kitctl doctor" doctor.out
head -n 1 doctor.out | grep -q '^GPU run: .*; CPU run: ' || { head -n 3 doctor.out >&2; fail "kitctl doctor's first line is not the verdict"; }
say "kitctl doctor: exit $rc, no traceback; $(head -n 1 doctor.out)"

rc=0
kitctl run maxbatch --runtime local --engines pytorch-eager --precision fp32 \
  --start-batch 2 --max-batch 2 --timeout 300 --results-dir "$work/results" >run.out 2>&1 || rc=$?
no_traceback "the CPU search" run.out
[[ $rc -eq 0 ]] || { tail -n 40 run.out >&2; fail "the CPU search exited $rc"; }
# --device auto (the default) on a host without a usable GPU: the CPU, capped, the cap printed
grep -q 'memory cap [0-9,]* MiB per candidate' run.out || { head -n 3 run.out >&2; fail "the run printed no memory cap"; }
shopt -s nullglob
artifacts=("$work"/results/maxbatch-*.json)
[[ ${#artifacts[@]} -eq 1 && ${artifacts[0]} != *.partial.json ]] ||
  fail "the CPU search left ${artifacts[*]:-no artifact} in $work/results"
kitctl report "${artifacts[0]}" >report.out 2>&1 || { cat report.out >&2; fail "kitctl report of the artifact failed"; }
say "CPU search: exit 0, $(basename "${artifacts[0]}")"

python3 -m pip install -q --disable-pip-version-check 'deptry>=0.25,<0.26' \
  2> >(grep -v "^WARNING: Location '" >&2) || fail "installing deptry failed"
(cd "$root" && deptry .) || fail "deptry: the host's imports and pyproject.toml's dependencies differ"
say "done"
