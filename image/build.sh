#!/usr/bin/env bash
# Builds the OpenShell OCI image from release binaries that already exist
# (scripts/build-image.sh builds them first, then calls this):
#
#   image/build.sh [BIN_DIR]
#
# BIN_DIR (default ${CARGO_TARGET_DIR:-target}/release) holds
# openshell-gateway, openshell-supervisor, openshell-sandbox-runtime and
# openshell-pool. Writes the OCI image layout ${CARGO_TARGET_DIR:-target}/image/openshell-oci
# with one tag, the workspace version (override: OPENSHELL_IMAGE_TAG), and
# prints `skopeo inspect` of it. Needs root (mmdebstrap's root mode, files
# owned by 65532) and the Debian mirror; no Docker engine.
#
# The image: two layers, (1) a Debian 12 root filesystem holding only the
# packages of image/packages (libc6 and libgcc-s1 for the binaries,
# ca-certificates, base-files), finished by image/rootfs.sh (user openshell
# 65532:65532, /var/lib/openshell owned by it), (2) the four binaries in
# /usr/local/bin. No entrypoint or command (the Helm chart gives the
# command), user 65532:65532, working directory /var/lib/openshell,
# org.opencontainers.image.* labels. image/Dockerfile builds the same image
# with Docker.
#
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian),
# DEBIAN_SECURITY_MIRROR (default http://deb.debian.org/debian-security),
# OPENSHELL_IMAGE_TAG, SOURCE_DATE_EPOCH (the image's creation time; default
# the commit time of HEAD). The layers are not bit-for-bit reproducible
# (umoci records file times as found).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
bin_dir=${1:-$target/release}
out=$target/image
layout=$out/openshell-oci
work=$out/work
binaries=(openshell-gateway openshell-supervisor openshell-sandbox-runtime openshell-pool)

if [ "$(id -u)" -ne 0 ]; then
  echo "image/build.sh: run as root (mmdebstrap's root mode; files owned by 65532)" >&2
  exit 1
fi
"$here/deps.sh"

# The workspace version ([workspace.package] version in Cargo.toml).
version=$(awk '/^\[workspace.package\]/ { p = 1; next } /^\[/ { p = 0 }
  p && $1 == "version" { gsub(/"/, "", $3); print $3 }' "$repo/Cargo.toml")
tag=${OPENSHELL_IMAGE_TAG:-$version}
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
if ! git -C "$repo" diff --quiet HEAD 2>/dev/null; then
  revision="$revision-dirty" # built from uncommitted changes
fi
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
arch=$(dpkg --print-architecture)

# Every binary is there and is the workspace version.
for bin in "${binaries[@]}"; do
  if [ ! -x "$bin_dir/$bin" ]; then
    echo "image/build.sh: $bin_dir/$bin is missing; build it: cargo build --release -p gateway-plugin -p supervisor -p cli" >&2
    exit 1
  fi
  got=$("$bin_dir/$bin" --version)
  if [ "$got" != "$bin $version" ]; then
    echo "image/build.sh: $bin_dir/$bin --version says '$got', expected '$bin $version'" >&2
    exit 1
  fi
done

rm -rf "$layout" "$work"
mkdir -p "$work"
started=$SECONDS

echo "--- root filesystem (mmdebstrap, Debian 12)"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
deps=$(awk '!/^#/ && $2 == "deps" { print $1 }' "$here/packages" | paste -sd, -)
mmdebstrap --quiet --mode=root --variant=extract --include="$deps" \
  --extract-hook="\"$here/extract-hook.sh\" \"\$1\" \"$work/debs\"" \
  bookworm "$work/rootfs" \
  "deb $mirror bookworm main" \
  "deb $mirror bookworm-updates main" \
  "deb $security bookworm-security main"
"$here/rootfs.sh" "$work/rootfs" "$work/debs"/*.deb
rootfs_done=$SECONDS

echo "--- OCI layout $layout:$tag (umoci)"
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci unpack --image "$layout:$tag" "$work/bundle" >/dev/null
cp -a "$work/rootfs/." "$work/bundle/rootfs/"
umoci repack --image "$layout:$tag" --history.created "$created" \
  --history.created_by "image/build.sh: Debian 12 root filesystem ($(awk '!/^#/ && NF { print $1 }' "$here/packages" | paste -sd' ' -))" \
  "$work/bundle"
# Layer 2, the binaries: `umoci insert` (a second repack of the same bundle
# would replace layer 1, not add to it).
mkdir -m 0755 "$work/bin"
for bin in "${binaries[@]}"; do
  install -o 0 -g 0 -m 0755 "$bin_dir/$bin" "$work/bin/$bin"
done
umoci insert --image "$layout:$tag" --history.created "$created" \
  --history.created_by "image/build.sh: ${binaries[*]} in /usr/local/bin" \
  "$work/bin" /usr/local/bin

labels=(
  "org.opencontainers.image.title=openshell"
  "org.opencontainers.image.description=OpenShell gateway, supervisor, sandbox runtime and CLI (openshell-gateway, openshell-supervisor, openshell-sandbox-runtime, openshell-pool)"
  "org.opencontainers.image.version=$version"
  "org.opencontainers.image.revision=$revision"
  "org.opencontainers.image.created=$created"
  "org.opencontainers.image.licenses=Apache-2.0"
)
label_args=()
for label in "${labels[@]}"; do
  label_args+=(--config.label "$label" --manifest.annotation "$label")
done
umoci config --image "$layout:$tag" --no-history \
  --created "$created" --architecture "$arch" --os linux \
  --config.user 65532:65532 --config.workingdir /var/lib/openshell \
  --config.env PATH=/usr/local/bin:/usr/bin:/bin \
  --clear config.entrypoint --clear config.cmd \
  "${label_args[@]}"
umoci gc --layout "$layout"
rm -rf "$work"
# umoci writes blobs 0600: let any user read the layout (skopeo copy).
chmod -R a+rX "$layout"

echo "--- skopeo inspect oci:$layout:$tag"
skopeo inspect "oci:$layout:$tag"
echo "image/build.sh: built oci:$layout:$tag ($(du -sh --apparent-size "$layout/blobs" | cut -f1) compressed)" \
  "in $((SECONDS - started))s (root filesystem $((rootfs_done - started))s, OCI layout $((SECONDS - rootfs_done))s)"
