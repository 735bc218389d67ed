#!/usr/bin/env bash
# Build the sandbox base image offline: a minimal Debian rootfs with Python 3 made by debootstrap
# from the host's own apt mirror, imported with `docker import`. No registry is needed.
#
#   docker/build-base.sh TAG            (root: debootstrap and chroot need it)
#
# The image holds a virtual environment at /opt/rcb (empty but for pip) that the per-paper
# environment images install their wheels into. Everything the build depends on is in this file,
# so the tag callers compute from its hash (benchmark_core.sandbox.docker) changes when it does.
set -euo pipefail
TAG="${1:?usage: build-base.sh TAG}"
SUITE="${RCB_DEBIAN_SUITE:-bookworm}"   # bookworm ships Python 3.11, the version the wheels target
PACKAGES=python3,python3-venv,ca-certificates

mirror() {
  # the first plain Debian archive the host itself uses (deb822 or one-line sources)
  if [ -n "${RCB_DEBIAN_MIRROR:-}" ]; then echo "$RCB_DEBIAN_MIRROR"; return; fi
  local url
  url=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | grep -oE '(https?|file)://[^ ]*/debian/?( |$)' | grep -v security | head -n1 | tr -d ' ')
  echo "${url:-http://deb.debian.org/debian}"
}

for tool in debootstrap docker tar; do
  command -v "$tool" >/dev/null || { echo "build-base.sh: $tool is missing (apt-get install debootstrap)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "build-base.sh: must run as root (debootstrap)" >&2; exit 1; }

WORK="$(mktemp -d /var/tmp/rcb-base.XXXXXX)"
cleanup() {
  # debootstrap mounts /proc and /sys inside the rootfs; never let rm walk into a mount
  grep -o " $WORK/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
ROOTFS="$WORK/rootfs"
MIRROR="$(mirror)"
echo "build-base.sh: debootstrap $SUITE from $MIRROR" >&2
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
  || { tail -n 30 "$WORK/debootstrap.log" >&2; exit 1; }

# the environment every sandbox interpreter runs in; pip comes from Debian's bundled wheel
chroot "$ROOTFS" /usr/bin/python3 -m venv /opt/rcb
chroot "$ROOTFS" /opt/rcb/bin/python -c 'import pip, sys; print("python", sys.version.split()[0], "pip", pip.__version__)' >&2

# smaller image, nothing a test needs
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
  "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* \
  "$ROOTFS"/var/log/*.log "$ROOTFS"/var/cache/debconf/*-old
find "$ROOTFS"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} + 2>/dev/null || true
mkdir -p "$ROOTFS/rcb" "$ROOTFS/work"

tar --numeric-owner -C "$ROOTFS" -c . | docker import \
  --change 'ENV PATH=/opt/rcb/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'LABEL org.rcbhub.role=base' \
  --change 'CMD ["/opt/rcb/bin/python"]' \
  - "$TAG" >/dev/null
echo "build-base.sh: built $TAG ($(du -sh "$ROOTFS" | cut -f1) rootfs)" >&2
