#!/usr/bin/env bash
# A Docker engine that supports CDI, from Debian trixie's packages: dockerd 26.1 (CDI), containerd
# 1.7, its runc shim, runc, and tini as docker-init. Uses this machine's apt sources with the
# suite renamed (or deb.debian.org); installs nothing here. Two uses:
#   tools/docker-engine-payload.sh .gpu-docker/docker.tar.xz   one carryable file (~40 MB, ~2 min
#                                                              of xz) for the GPU machine
#                                                              (tools/device-docker-setup.sh)
#   tools/docker-engine-payload.sh /opt/kitctl-cdi-dockerd     a folder with bin/ (CI's second
#                                                              daemon: .ci/cdi-dockerd.sh)
# Either holds bin/{dockerd,containerd,containerd-shim-runc-v2,runc,docker-init} and PACKAGES
# (the .deb files used). The binaries are dynamically linked against glibc, libsystemd0 and
# libseccomp2 (Ubuntu 24.04 and Debian 12 have them). From the project's shared make-payload.sh.
set -euo pipefail
die() { printf 'docker-engine-payload: %s\n' "$*" >&2; exit 1; }
[[ $# -eq 1 && -n $1 ]] || die "usage: $0 OUT.tar.xz | OUT_DIR"
out=$(realpath -m "$1")
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
mkdir -p "$w/etc/parts" "$w/lists/partial" "$w/cache/archives/partial" "$w/deb" "$w/x" "$w/p/bin"
: > "$w/status"
if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
  sed -E 's/\bbookworm(-updates|-security)?\b/trixie\1/g' /etc/apt/sources.list.d/debian.sources > "$w/etc/parts/debian.sources"
else
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    > "$w/etc/parts/debian.sources"
fi
o=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$w/etc/parts" -o "Dir::State::Lists=$w/lists"
   -o "Dir::Cache=$w/cache" -o "Dir::State::status=$w/status" -o "APT::Architecture=amd64" -o "APT::Architectures=amd64"
   -o "APT::Sandbox::User=root")
apt-get "${o[@]}" update -qq || die "apt-get update of Debian trixie's lists failed"
(cd "$w/deb" && apt-get "${o[@]}" download docker.io containerd runc tini >/dev/null) ||
  die "downloading docker.io containerd runc tini from Debian trixie failed"
for d in "$w"/deb/*.deb; do dpkg-deb -x "$d" "$w/x"; done
for b in dockerd containerd containerd-shim-runc-v2 runc; do
  f=$(find "$w/x" -type f -name "$b" -perm -u+x | head -1); [[ -n $f ]] || die "no $b in the packages"
  cp "$f" "$w/p/bin/"
done
f=$(find "$w/x" -type f -name tini-static | head -1); [[ -n $f ]] || die "no tini-static in the packages"
cp "$f" "$w/p/bin/docker-init"
(cd "$w/deb" && ls) > "$w/p/PACKAGES"
if [[ $out == *.tar.xz ]]; then
  mkdir -p "$(dirname "$out")"
  tar -C "$w/p" -cJf "$out.tmp" . && mv "$out.tmp" "$out"
  echo "$out: $(du -h "$out" | cut -f1) ($(tr '\n' ' ' < "$w/p/PACKAGES"))"
else
  mkdir -p "$out"
  rm -rf "$out/bin.new"
  cp -a "$w/p/bin" "$out/bin.new" && rm -rf "${out:?}/bin" && mv "$out/bin.new" "$out/bin"
  cp "$w/p/PACKAGES" "$out/PACKAGES"
  echo "$out: $(du -sh "$out" | cut -f1) ($(tr '\n' ' ' < "$w/p/PACKAGES"))"
fi
