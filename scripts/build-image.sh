#!/usr/bin/env bash
# Builds the OpenShell OCI image with Debian's tools, no Docker engine (a
# documented command, not part of CI):
#
#   scripts/build-image.sh            # then: scripts/test-image.sh
#
# 1. installs mmdebstrap, umoci and skopeo if missing (image/deps.sh);
# 2. `cargo build --release` of the four binaries (openshell-gateway,
#    openshell-supervisor, openshell-sandbox-runtime, openshell-pool);
# 3. image/build.sh: a Debian 12 root filesystem holding only what they need
#    plus the binaries, as the OCI image layout
#    ${CARGO_TARGET_DIR:-target}/image/openshell-oci, tagged with the
#    workspace version, and `skopeo inspect` of it.
#
# Needs root and the Debian mirror (DEBIAN_MIRROR to use another). Push it
# with skopeo, e.g.
#   skopeo copy oci:target/image/openshell-oci:0.1.0 docker://registry.example.com/openshell:0.1.0
# image/README.md says more; image/Dockerfile builds the same image with Docker.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/build-image.sh: run as root (mmdebstrap's root mode; files owned by 65532)" >&2
  exit 1
fi
image/deps.sh

echo "--- cargo build --release"
cargo build --release -p gateway-plugin -p supervisor -p cli
built=$SECONDS

image/build.sh "${CARGO_TARGET_DIR:-target}/release"
echo "scripts/build-image.sh: $((SECONDS - started))s (cargo $((built - started))s, image $((SECONDS - built))s)"
