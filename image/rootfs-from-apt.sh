#!/usr/bin/env bash
# The root filesystem from the system's own apt, for image/Dockerfile (in
# debian:bookworm-slim) and for scripts/test-image.sh (on a Debian 12 host, to
# check the Dockerfile's tree equals image/build.sh's):
#
#   image/rootfs-from-apt.sh ROOTFS
#
# Downloads every package of image/packages without resolving dependencies
# (image/build.sh checks, through mmdebstrap, that the `deps` ones are closed),
# extracts them into ROOTFS (which must not exist yet) and finishes it with
# image/rootfs.sh. Run `apt-get update` first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rootfs=$1
if [ -e "$rootfs" ]; then
  echo "image/rootfs-from-apt.sh: $rootfs exists" >&2
  exit 1
fi
debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
mapfile -t packages < <(awk '!/^#/ && NF { print $1 }' "$here/packages")
(cd "$debs" && apt-get download -q -o APT::Sandbox::User=root "${packages[@]}")
mkdir -p "$rootfs"
for deb in "$debs"/*.deb; do
  dpkg-deb --extract "$deb" "$rootfs"
done
"$here/rootfs.sh" "$rootfs" "$debs"/*.deb
