#!/usr/bin/env bash
# Installs the Debian tools that build and test the image, if missing:
# mmdebstrap (the root filesystem), umoci (the OCI image layout), skopeo
# (inspecting and pushing it); for scripts/test-image.sh also jq, curl and
# iproute2. Idempotent: checks each tool first and runs
# apt-get only for what is missing. Needs root (as the build does).
set -euo pipefail

missing=()
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
command -v umoci >/dev/null 2>&1 || missing+=(umoci)
command -v skopeo >/dev/null 2>&1 || missing+=(skopeo)
command -v dpkg-deb >/dev/null 2>&1 || missing+=(dpkg)
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "image/deps.sh: missing ${missing[*]}; install them (apt-get install ${missing[*]}) or run as root" >&2
    exit 1
  fi
  echo "image/deps.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Other builds may hold the dpkg lock for a while: wait instead of failing.
  apt-get update -qq -o DPkg::Lock::Timeout=300
  apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${missing[@]}"
fi
