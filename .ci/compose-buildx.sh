#!/usr/bin/env bash
# Docker Compose v2 and buildx as CLI plugins, from Debian trixie's packages (Debian 12 has only
# docker-compose 1.29 and no buildx). Installs nothing system-wide: the binaries go to
# $DIR/cli-plugins (default /opt/kitctl-docker-plugins), which `docker` finds through
# DOCKER_CONFIG=$DIR (tests/test_compose.py and kitctl take it from KITCTL_DOCKER_CONFIG, or
# from ~/.docker/cli-plugins where a user installed them). Uses this machine's apt sources with the
# suite renamed, like tools/docker-engine-payload.sh. Skipped when present.
set -euo pipefail
DIR="${KITCTL_DOCKER_PLUGINS_DIR:-/opt/kitctl-docker-plugins}"
log() { printf '[compose-buildx %(%H:%M:%S)T] %s\n' -1 "$*"; }
if [[ -x $DIR/cli-plugins/docker-compose && -x $DIR/cli-plugins/docker-buildx ]]; then
  log "present in $DIR/cli-plugins"; exit 0
fi
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
mkdir -p "$w/etc/parts" "$w/lists/partial" "$w/cache/archives/partial" "$w/deb" "$w/x"
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
apt-get "${o[@]}" update -qq
(cd "$w/deb" && apt-get "${o[@]}" download docker-compose docker-buildx >/dev/null)
for d in "$w"/deb/*.deb; do dpkg-deb -x "$d" "$w/x"; done
mkdir -p "$DIR/cli-plugins"
for b in docker-compose docker-buildx; do
  f=$(find "$w/x" -path "*cli-plugins/$b" \( -type f -o -type l \) | head -1)
  [[ -n $f ]] || { echo "compose-buildx: no cli-plugins/$b in the packages" >&2; exit 1; }
  cp -L "$f" "$DIR/cli-plugins/$b"; chmod 755 "$DIR/cli-plugins/$b"
done
(cd "$w/deb" && ls) > "$DIR/PACKAGES"
log "$DIR/cli-plugins: $(tr '\n' ' ' < "$DIR/PACKAGES")"
