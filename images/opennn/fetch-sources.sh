#!/usr/bin/env bash
# Fetch each source of images/opennn/sources.lock into DEST/<name> at its pinned commit, verified.
#
#   fetch-sources.sh DEST
#
# Per source: a shallow fetch of exactly the pinned commit (GitHub serves any commit by id); if a
# server refuses that, the tag or branch of the lock's last column, then all branches and tags.
# `git rev-parse HEAD` must equal the lock's commit, else the source is removed and the script
# fails. DEST/<name>/.kit-commit holds the commit (build.sh reads it where .git is gone), and
# DEST/kit-sources.lock the lines actually used. Needs git and the network (the Docker builder).
#
# Environment:
#   KIT_SOURCES_LOCK   the lock to read (default: sources.lock beside this script)
#   KIT_OPENNN_COMMIT  a full commit of OpenNN to fetch instead of the lock's (the image's
#                      OPENNN_REF build arg); recorded as such
#   KIT_FETCH_TRIES    attempts per network step (default 3)
set -euo pipefail

die() { printf 'fetch-sources: %s\n' "$*" >&2; exit 1; }

[[ $# -eq 1 && -n $1 ]] || die "usage: $0 DEST"
dest=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lock=${KIT_SOURCES_LOCK:-$here/sources.lock}
tries=${KIT_FETCH_TRIES:-3}
[[ -f $lock ]] || die "no lock file at $lock"
[[ -z ${KIT_OPENNN_COMMIT:-} || $KIT_OPENNN_COMMIT =~ ^[0-9a-f]{40}$ ]] ||
  die "KIT_OPENNN_COMMIT must be a full 40-hex commit, not '${KIT_OPENNN_COMMIT}'"
command -v git >/dev/null || die "git is not installed"
export GIT_TERMINAL_PROMPT=0 # a wrong URL fails instead of asking for a password

# Network steps are retried: one dropped connection should not fail a 30-minute image build.
retry() {
  local i
  for ((i = 1; i <= tries; i++)); do
    "$@" && return 0
    ((i < tries)) && sleep $((2 * i))
  done
  return 1
}

# One source into $dir at $commit; returns non-zero (with a message) if that cannot be had.
fetch_one() {
  local name=$1 url=$2 commit=$3 tag=$4 dir=$5
  git init -q "$dir" && git -C "$dir" remote add origin "$url" || return 1
  if ! retry git -C "$dir" fetch -q --depth 1 --no-tags origin "$commit" 2>/dev/null; then
    echo "fetch-sources: $name: $url did not serve $commit by id; trying '$tag'" >&2
    retry git -C "$dir" fetch -q --depth 1 --no-tags origin "$tag" 2>/dev/null || true
    if ! git -C "$dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
      local deepen=()
      [[ -f $dir/.git/shallow ]] && deepen=(--unshallow)
      retry git -C "$dir" fetch -q "${deepen[@]}" --no-tags origin \
        '+refs/heads/*:refs/remotes/origin/*' '+refs/tags/*:refs/tags/*' ||
        { echo "fetch-sources: $name: cannot fetch from $url" >&2; return 1; }
    fi
  fi
  git -C "$dir" cat-file -e "$commit^{commit}" 2>/dev/null ||
    { echo "fetch-sources: $name: commit $commit is not in $url" >&2; return 1; }
  git -C "$dir" -c advice.detachedHead=false checkout -q --detach "$commit" ||
    { echo "fetch-sources: $name: checkout of $commit failed" >&2; return 1; }
  local head
  head=$(git -C "$dir" rev-parse HEAD)
  [[ $head == "$commit" ]] ||
    { echo "fetch-sources: $name: HEAD is $head, the lock says $commit" >&2; return 1; }
  printf '%s\n' "$commit" >"$dir/.kit-commit"
}

mkdir -p "$dest"
used=$(mktemp)
trap 'rm -f "$used"' EXIT
n=0
while read -r name url commit tag extra <&3; do
  [[ -z ${name:-} || $name == \#* ]] && continue
  [[ -n ${tag:-} && -z ${extra:-} ]] || die "$lock: '$name' line needs exactly: name url commit tag"
  [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "$lock: bad source name '$name'"
  [[ $commit =~ ^[0-9a-f]{40}$ ]] || die "$lock: $name: '$commit' is not a full 40-hex commit"
  if [[ $name == opennn && -n ${KIT_OPENNN_COMMIT:-} && $KIT_OPENNN_COMMIT != "$commit" ]]; then
    echo "fetch-sources: opennn: KIT_OPENNN_COMMIT=$KIT_OPENNN_COMMIT replaces the lock's $commit ($tag)" >&2
    commit=$KIT_OPENNN_COMMIT
    tag=override
  fi
  dir=$dest/$name
  if [[ -e $dir ]] && [[ -n $(ls -A "$dir" 2>/dev/null) ]]; then
    die "$dir exists and is not empty (give an empty DEST)"
  fi
  if ! fetch_one "$name" "$url" "$commit" "$tag" "$dir" </dev/null; then
    rm -rf "$dir"
    die "$name: giving up; nothing was left in $dir"
  fi
  printf '%-16s %s %s %s\n' "$name" "$url" "$commit" "$tag" >>"$used"
  printf 'fetch-sources: %-16s %s  %s\n' "$name" "$commit" "$tag"
  n=$((n + 1))
done 3<"$lock"
((n > 0)) || die "$lock names no source"
cp "$used" "$dest/kit-sources.lock"
