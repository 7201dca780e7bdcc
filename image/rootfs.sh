#!/usr/bin/env bash
# Finishes the image's root filesystem from extracted Debian packages:
#
#   image/rootfs.sh ROOTFS DEB...
#
# ROOTFS holds the packages of image/packages already extracted (not
# installed: no maintainer script ran); DEB... are their .deb files. Shared by
# image/build.sh (after mmdebstrap) and image/Dockerfile (after apt-get
# download), so both images have the same files. It does what the packages'
# scripts would have done and an image needs, and nothing else:
#
# - /var/lib/dpkg/status.d/<package>: each package's control fields, the way
#   distroless images record them, so image scanners (trivy, grype) see the
#   Debian packages and versions; the dpkg database itself is left empty;
# - /etc/ssl/certs/ca-certificates.crt: every certificate of the
#   ca-certificates package, concatenated (what update-ca-certificates does
#   with its default configuration); rustls-native-certs reads this file;
# - /etc/passwd and /etc/group: root, nobody and `openshell` (65532:65532);
#   /etc/nsswitch.conf (`hosts: files dns`: /etc/hosts first, as Kubernetes
#   expects; glibc without the file asks DNS first);
# - /var/lib/openshell (the data directory, 0750, owned by 65532) and
#   /usr/local/bin (the binaries go there: a separate layer);
# - removes what a container does not use: documentation (each package's
#   copyright file and /usr/share/common-licenses stay), locales, the
#   character-set converters of libc6 (gconv, 8 MB; the binaries are Rust and
#   never call iconv), device nodes (the runtime makes /dev), apt and dpkg
#   state and the host's resolv.conf/hostname that the build left behind;
#   clears every setuid/setgid bit.
set -euo pipefail

if [ "$#" -lt 2 ]; then
  echo "usage: $0 ROOTFS DEB..." >&2
  exit 2
fi
rootfs=$1
shift

# Package records for scanners.
mkdir -p "$rootfs/var/lib/dpkg/status.d"
for deb in "$@"; do
  name=$(dpkg-deb --field "$deb" Package)
  {
    dpkg-deb --field "$deb"
    echo "Status: install ok installed"
  } >"$rootfs/var/lib/dpkg/status.d/$name"
done

# Trim.
if [ -d "$rootfs/usr/share/doc" ]; then
  find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
fi
rm -rf "$rootfs"/usr/share/man "$rootfs"/usr/share/info "$rootfs"/usr/share/locale "$rootfs"/usr/share/lintian \
  "$rootfs"/usr/lib/x86_64-linux-gnu/gconv "$rootfs"/usr/lib/aarch64-linux-gnu/gconv \
  "$rootfs"/etc/apt "$rootfs"/etc/dpkg "$rootfs"/var/lib/apt "$rootfs"/var/cache/apt \
  "$rootfs"/var/cache/debconf "$rootfs"/var/log/apt "$rootfs"/var/log/dpkg.log \
  "$rootfs"/etc/resolv.conf "$rootfs"/etc/hostname "$rootfs"/etc/hosts "$rootfs"/etc/fstab
find "$rootfs/var/lib/dpkg" -mindepth 1 -maxdepth 1 ! -name status.d -exec rm -rf {} +
if [ -d "$rootfs/dev" ]; then
  find "$rootfs/dev" -mindepth 1 -delete
fi
# No setuid or setgid bit anywhere (base-files makes /var/local setgid
# staff, for the admin of a full system): the image runs as 65532 with
# nothing to escalate to.
find "$rootfs" -perm /6000 -exec chmod ug-s {} +
mkdir -p "$rootfs/dev" "$rootfs/proc" "$rootfs/sys" "$rootfs/tmp" "$rootfs/etc"
chmod 1777 "$rootfs/tmp"

# The CA bundle: every certificate, sorted by path, each ending in a newline.
if [ -d "$rootfs/usr/share/ca-certificates" ]; then
  mkdir -p "$rootfs/etc/ssl/certs"
  find "$rootfs/usr/share/ca-certificates" -name '*.crt' | LC_ALL=C sort | while read -r cert; do
    cat "$cert"
    [ -z "$(tail -c 1 "$cert")" ] || echo
  done >"$rootfs/etc/ssl/certs/ca-certificates.crt"
  chmod 0644 "$rootfs/etc/ssl/certs/ca-certificates.crt"
fi

# Users: no login shell exists in the image.
cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
openshell:x:65532:65532:openshell:/var/lib/openshell:/usr/sbin/nologin
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
openshell:x:65532:
EOF
cat >"$rootfs/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
shadow: files
hosts: files dns
networks: files
protocols: files
services: files
EOF
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group" "$rootfs/etc/nsswitch.conf"

mkdir -p "$rootfs/root" "$rootfs/var/lib/openshell" "$rootfs/usr/local/bin"
chmod 0700 "$rootfs/root"
chown 65532:65532 "$rootfs/var/lib/openshell"
chmod 0750 "$rootfs/var/lib/openshell"
