#!/bin/bash
# The local base image of bkspark's container images (docs/testing.md): a minimal Debian root made by
# `debootstrap --variant=minbase` from the Debian archive this machine's apt already uses, turned into an image by
# `docker import`. Nothing is pulled from an image registry.
#   docker/base.sh IMAGE [LABEL=VALUE]   (e.g. bkspark/debian-base:bookworm; bkspark.testing.images labels it
#   with the hash of this script, its cache key)
set -euo pipefail
image=${1:?usage: docker/base.sh IMAGE [LABEL=VALUE]}
label=${2:-org.bkspark.base=1}
suite=${BKSPARK_DEBIAN_SUITE:-bookworm}

# The mirror: the first URI of apt's sources that serves "$suite" (deb822 .sources or one-line .list files),
# else BKSPARK_DEBIAN_MIRROR, else deb.debian.org.
mirror=${BKSPARK_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    mirror=$(awk -v s="$suite" '
      /^URIs:/ {u=$2} /^Suites:/ {for (i=2;i<=NF;i++) if ($i==s) ok=1}
      /^$/ {if (ok && u ~ /debian$/) {print u; exit} ok=0; u=""}
      END {if (ok && u ~ /debian$/) print u}' "$f" | head -1)
    [ -n "$mirror" ] && break
  done
fi
if [ -z "$mirror" ]; then
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | awk -v s="$suite" '$1=="deb" {for (i=2;i<=NF;i++) if ($i ~ /^(http|https|file):/ && $(i+1)==s) {print $i; exit}}' | head -1)
fi
mirror=${mirror:-http://deb.debian.org/debian}

root=$(mktemp -d /var/tmp/bkspark-base.XXXXXX)
# debootstrap's second stage mounts proc and sys in the root: never archive them, never delete through them.
unmount() { for m in proc sys; do if mountpoint -q "$root/$m"; then umount -l "$root/$m" || true; fi; done; }
trap 'unmount; rm -rf --one-file-system "$root"' EXIT
echo "bkspark: debootstrap --variant=minbase $suite from $mirror"
# In two stages, so that dpkg installs the packages without an fsync per file (force-unsafe-io, set between the
# stages): on a busy machine that saves much of the second stage's time.
{ debootstrap --foreign --variant=minbase "$suite" "$root" "$mirror" \
  && echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/90bkspark-unsafe-io" \
  && chroot "$root" /debootstrap/debootstrap --second-stage; } >"$root.log" 2>&1 \
  || { tail -30 "$root.log"; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
unmount
# The image's apt uses the same mirror and keeps debootstrap's package lists, so that the Dockerfiles install
# without an `apt-get update` of their own (they update only when an install fails: lists gone stale). No
# recommends, and dpkg still without fsync (a layer that fails is built again anyway), as Debian's own images do.
rm -rf "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' >"$root/etc/apt/apt.conf.d/90bkspark"
tar -C "$root" --one-file-system -c . | docker import -c 'CMD ["/bin/bash"]' -c "LABEL $label" -c 'ENV LANG=C.UTF-8' - "$image" >/dev/null
echo "bkspark: base image $image"
