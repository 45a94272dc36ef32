#!/usr/bin/env bash
# A base for the GPU engine images made from Debian's packages alone: no NVIDIA registry, no Docker
# Hub. The CUDA libraries the frameworks load (cudart, cuBLAS, cuDNN, NCCL, ...) come from PyPI
# in the hashed CUDA locks (torch's and jax's nvidia-* wheels), not from the base; the NVIDIA
# driver is injected by the container runtime (CDI or the nvidia runtime), never baked in.
#
#   images/debian-base/build.sh                 → kitctl/debian-base:trixie
#   DEBIAN_SUITE=trixie DEBIAN_MIRROR=http://snapshot.debian.org/archive/debian/20261201T000000Z \
#     images/debian-base/build.sh               → the same packages on any later day
#
# Debian 13 (trixie): python3 3.13, gcc 14 (torch.compile's inductor needs a C compiler at run
# time). No Debian release ships Python 3.12, the one the CUDA locks were resolved for: the locks
# carry the hashes of every wheel of each pinned version, so pip installs the same versions' cp313
# wheels, hash-checked; the image's check-framework step fails the build if anything differs.
# mmdebstrap is used when present (it honours SOURCE_DATE_EPOCH: same mirror state → same tar),
# else debootstrap. Env: DEBIAN_SUITE, DEBIAN_MIRROR, KITCTL_DEBIAN_BASE (the tag), SOURCE_DATE_EPOCH.
set -euo pipefail
SUITE="${DEBIAN_SUITE:-trixie}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
TAG="${KITCTL_DEBIAN_BASE:-kitctl/debian-base:$SUITE}"
PACKAGES=python3,python3-venv,python3-dev,gcc,g++,libc6-dev,ca-certificates
log() { printf '[debian-base %(%H:%M:%S)T] %s\n' -1 "$*"; }
die() { printf 'debian-base: %s\n' "$*" >&2; exit 1; }
command -v docker >/dev/null || die "no docker CLI"
w=$(mktemp -d /tmp/kitctl-debian-base.XXXXXX); trap 'rm -rf "$w"' EXIT
if command -v mmdebstrap >/dev/null; then
  log "mmdebstrap $SUITE from $MIRROR"
  mmdebstrap --variant=minbase --include="$PACKAGES" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/apt "$1"/var/log/dpkg.log "$1"/var/cache/ldconfig/aux-cache' \
    "$SUITE" "$w/rootfs.tar" "$MIRROR" >"$w/log" 2>&1 || { tail -n 30 "$w/log" >&2; exit 1; }
else
  command -v debootstrap >/dev/null || die "neither mmdebstrap nor debootstrap is installed (apt-get install mmdebstrap)"
  log "debootstrap $SUITE from $MIRROR (no mmdebstrap: the tar's times are today's)"
  mkdir "$w/root"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$w/root" "$MIRROR" >"$w/log" 2>&1 \
    || { tail -n 30 "$w/log" >&2; exit 1; }
  rm -rf "$w"/root/var/cache/apt/archives/*.deb "$w"/root/var/lib/apt/lists/* "$w"/root/var/log/apt \
    "$w"/root/var/log/dpkg.log "$w"/root/var/cache/ldconfig/aux-cache
  tar -C "$w/root" --sort=name ${SOURCE_DATE_EPOCH:+--mtime=@$SOURCE_DATE_EPOCH --clamp-mtime} -cf "$w/rootfs.tar" .
fi
python_version=$(tar -tf "$w/rootfs.tar" | sed -n 's#^\./usr/bin/python\(3\.[0-9]*\)$#\1#p' | head -1)
docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV NVIDIA_VISIBLE_DEVICES=all' \
  --change 'ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility' \
  --change "LABEL kit.base=debian kit.base.debian.suite=$SUITE kit.base.debian.mirror=$MIRROR kit.base.python=${python_version:-?}" \
  --change 'CMD ["/bin/bash"]' \
  "$w/rootfs.tar" "$TAG" >/dev/null
log "$TAG: $(docker image inspect -f '{{.Id}} {{.Size}} bytes' "$TAG"), python ${python_version:-?}"
