#!/usr/bin/env bash
# Fill DEST (default: .opennn-src in the repo root, git-ignored) with the five source trees of
# images/opennn/sources.lock, from local bare git mirrors instead of the network, trimmed to what
# the OpenNN build reads, so the folder can travel to a machine without a network (<= 40 MiB).
#
#   tools/opennn-sources-here.sh [DEST]
#
# A source's mirror is $KIT_MIRRORS/<owner>+<name>/repo (or .../<owner>+<name> itself if bare),
# <owner>/<name> being its GitHub URL's. Each tree is `git archive` of the pinned commit, so it
# has no .git: DEST/<name>/.kit-commit says the commit (build.sh reads it), DEST/<name>/
# .kit-trimmed what was left out, DEST/kit-sources.lock the lines used.
#
# Environment:
#   KIT_MIRRORS             where the mirrors are (default /work/.mirror)
#   KIT_SOURCES_LOCK        the lock (default images/opennn/sources.lock)
#   KIT_OPENNN_COMMIT       a full OpenNN commit instead of the lock's
#   KIT_SUBSTITUTE_<name>   (name with - as _) a commit of that mirror to take when the pinned one
#                           is not in it; it is recorded in DEST/<name>/.kit-substituted and
#                           printed as a warning: such a tree is not the locked source
#   KIT_NO_TRIM=1           keep every file
set -euo pipefail

die() { printf 'opennn-sources-here: %s\n' "$*" >&2; exit 1; }
warn() { printf 'opennn-sources-here: WARNING: %s\n' "$*" >&2; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$root/.opennn-src}
lock=${KIT_SOURCES_LOCK:-$root/images/opennn/sources.lock}
mirrors=${KIT_MIRRORS:-/work/.mirror}
[[ $# -le 1 ]] || die "usage: $0 [DEST]"
[[ -f $lock ]] || die "no lock file at $lock"
[[ -z ${KIT_OPENNN_COMMIT:-} || $KIT_OPENNN_COMMIT =~ ^[0-9a-f]{40}$ ]] ||
  die "KIT_OPENNN_COMMIT must be a full 40-hex commit"

# What each build provably does not read, relative to the tree (globs). The reasons:
#  opennn: examples/*/data are only copied next to example binaries, which a build with
#    OpenNN_BUILD_EXAMPLES=OFF never makes; each data/ is left empty so a build with examples
#    on still configures (and copies nothing).
#  eigen: OpenNN adds Eigen as a subproject with EIGEN_BUILD_TESTING and EIGEN_BUILD_DOC forced
#    OFF; test/, failtest/ and doc/ are read only under those, demos/ under EIGEN_BUILD_DEMOS and
#    bench/ under EIGEN_BUILD_BTL/SPBENCH, all off for a subproject.
#  cudnn-frontend: header-only; OpenNN forces CUDNN_FRONTEND_BUILD_SAMPLES/TESTS/PYTHON_BINDINGS
#    OFF, so samples/, test/ (both also need Catch2 from the network) and python/ are unread;
#    benchmark/ is named by no CMake file.
#  libjpeg-turbo: java/ is read only with WITH_JAVA (default off, needs a JDK).
#  zlib: nothing.
trim_list() {
  case $1 in
    opennn) echo 'examples/*/data' ;;
    eigen) echo 'test failtest doc demos bench' ;;
    cudnn-frontend) echo 'samples test python benchmark' ;;
    libjpeg-turbo) echo 'java' ;;
    *) echo '' ;;
  esac
}

mirror_of() { # URL -> bare mirror dir, or nothing
  local url=$1 path owner repo
  path=${url#*github.com[:/]}
  path=${path%.git}
  owner=${path%%/*}
  repo=${path#*/}
  [[ $path == */* && $owner != "$path" ]] || return 0
  local d
  for d in "$mirrors/$owner+$repo/repo" "$mirrors/$owner+$repo"; do
    if [[ -d $d ]] && git --git-dir="$d" rev-parse --git-dir >/dev/null 2>&1; then
      echo "$d"
      return 0
    fi
  done
}

mkdir -p "$dest"
work=$(mktemp -d "$dest/.incoming.XXXXXX")
trap 'rm -rf "$work"' EXIT
used=$work/kit-sources.lock
: >"$used"
names=()
substituted=()
while read -r name url commit tag extra <&3; do
  [[ -z ${name:-} || $name == \#* ]] && continue
  [[ -n ${tag:-} && -z ${extra:-} ]] || die "$lock: '$name' line needs exactly: name url commit tag"
  [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "$lock: bad source name '$name'"
  [[ $commit =~ ^[0-9a-f]{40}$ ]] || die "$lock: $name: '$commit' is not a full 40-hex commit"
  if [[ $name == opennn && -n ${KIT_OPENNN_COMMIT:-} ]]; then
    [[ $KIT_OPENNN_COMMIT != "$commit" ]] && tag=override
    commit=$KIT_OPENNN_COMMIT
  fi
  git_dir=$(mirror_of "$url")
  [[ -n $git_dir ]] || die "$name: no local mirror of $url under $mirrors (owner+name/repo)"
  use=$commit
  if ! git --git-dir="$git_dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
    var=KIT_SUBSTITUTE_${name//-/_}
    sub=${!var:-}
    [[ -n $sub ]] || die "$name: the pinned commit $commit ($tag) is not in $git_dir; refresh the mirror, or set $var=<commit> to take another (recorded as a substitute)"
    sub=$(git --git-dir="$git_dir" rev-parse --verify -q "$sub^{commit}") ||
      die "$name: $var=${!var} is not a commit of $git_dir"
    use=$sub
    substituted+=("$name: $use instead of the locked $commit ($tag)")
  fi
  out=$work/$name
  mkdir -p "$out"
  # Trimmed paths are left out of the archive itself: a mirror may lack the blobs of large data
  # files (only a full one is sure to have them), and nothing is written only to be deleted.
  removed=()
  if [[ -z ${KIT_NO_TRIM:-} ]]; then
    read -ra patterns <<<"$(trim_list "$name")" # read does not glob
    if ((${#patterns[@]})); then
      while IFS= read -r p; do
        for pattern in "${patterns[@]}"; do
          # shellcheck disable=SC2053 # $pattern is a glob on purpose; same depth as the pattern
          if [[ $p == $pattern && ${p//[!\/]/} == "${pattern//[!\/]/}" ]]; then
            removed+=("$p")
            break
          fi
        done
      done < <(git --git-dir="$git_dir" ls-tree -r -t --name-only "$use")
    fi
  fi
  excludes=()
  for p in "${removed[@]}"; do excludes+=(":(exclude,literal)$p"); done
  # (git archive may complain about a missing blob it then leaves out: shown only if it fails)
  if ! git --git-dir="$git_dir" archive --format=tar "$use" -- "${excludes[@]}" 2>"$work/archive.err" |
    tar -x -C "$out"; then
    cat "$work/archive.err" >&2
    die "$name: git archive of $use from $git_dir failed (objects missing from the mirror?)"
  fi
  if [[ $name == opennn ]]; then
    for p in "${removed[@]}"; do mkdir -p "$out/$p"; done # examples' data/: left empty
  fi
  printf '%s\n' "$use" >"$out/.kit-commit"
  if ((${#removed[@]})); then printf '%s\n' "${removed[@]}"; fi >"$out/.kit-trimmed"
  if [[ $use != "$commit" ]]; then
    printf 'substitute: %s\nlocked: %s %s\nfrom: %s\n' "$use" "$commit" "$tag" "$git_dir" >"$out/.kit-substituted"
    tag="SUBSTITUTE-for-$tag@${commit:0:12}" # one token: the file keeps the lock's 4 columns
  fi
  printf '%-16s %s %s %s\n' "$name" "$url" "$use" "$tag" >>"$used"
  printf 'opennn-sources-here: %-16s %s  %s (%s left out)\n' "$name" "$use" "$tag" "${#removed[@]}"
  names+=("$name")
done 3<"$lock"
((${#names[@]} > 0)) || die "$lock names no source"

# Every tree is ready: replace the old ones only now, so a failure above leaves DEST as it was.
for name in "${names[@]}"; do
  rm -rf "${dest:?}/$name"
  mv "$work/$name" "$dest/$name"
done
mv "$used" "$dest/kit-sources.lock"
rm -rf "$work"
trap - EXIT
for s in "${substituted[@]}"; do warn "$s"; done
size=$(du -sh "$dest" | cut -f1)
bytes=$(du -sb "$dest" | cut -f1)
echo "opennn-sources-here: $dest: $size ($bytes bytes, $(find "$dest" -type f | wc -l) files)"
