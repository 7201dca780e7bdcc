#!/usr/bin/env bash
# mmdebstrap's --extract-hook for image/build.sh (not run by hand):
#
#   image/extract-hook.sh ROOTFS DEB_DIR
#
# mmdebstrap has extracted the `deps` packages of image/packages (and what apt
# resolved them to) into ROOTFS. This checks apt resolved exactly the listed
# set (so image/Dockerfile, which downloads the list without resolving it,
# gets the same packages), adds the `data` packages without their
# dependencies, from the same apt configuration and mirror, and copies every
# .deb to DEB_DIR. build.sh then finishes the tree with image/rootfs.sh once
# mmdebstrap has unmounted /dev and removed its own files.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rootfs=$1
deb_dir=$2
: "${MMDEBSTRAP_APT_CONFIG:?run by mmdebstrap --extract-hook only}"

listed() { awk -v kind="$1" '!/^#/ && $2 == kind { print $1 }' "$here/packages" | LC_ALL=C sort; }

debs=()
for deb in ${MMDEBSTRAP_ESSENTIAL:-}; do
  debs+=("$rootfs/$deb")
done
resolved=$(for deb in "${debs[@]}"; do dpkg-deb --field "$deb" Package; done | LC_ALL=C sort)
if [ "$resolved" != "$(listed deps)" ]; then
  echo "image/extract-hook.sh: apt resolved the deps packages to: $(paste -sd' ' - <<<"$resolved")" >&2
  echo "but image/packages lists: $(listed deps | paste -sd' ' -)" >&2
  echo "update image/packages (the Dockerfile downloads exactly that list)" >&2
  exit 1
fi

archives="$rootfs/var/cache/apt/archives"
mapfile -t data < <(listed data)
(cd "$archives" && APT_CONFIG=$MMDEBSTRAP_APT_CONFIG apt-get download -q -o APT::Sandbox::User=root "${data[@]}")
for name in "${data[@]}"; do
  deb=$(ls "$archives/${name}"_*.deb)
  dpkg-deb --extract "$deb" "$rootfs"
  debs+=("$deb")
done

mkdir -p "$deb_dir"
cp "${debs[@]}" "$deb_dir/"
