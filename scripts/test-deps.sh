#!/usr/bin/env bash
# What the test suite needs beyond the Rust toolchain, from Debian's packages.
# Idempotent: checks each tool first and runs apt-get only for what is missing.
# Needs root; scripts/test.sh calls it when it runs as root.
#
# - the Jepsen harness (network namespaces, partitions, packet loss, clock
#   skew): iproute2, nftables, iptables, faketime (jepsen/ci-deps.sh);
# - process tests find and signal processes with pgrep/pkill/kill: procps.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v pgrep >/dev/null 2>&1 || missing+=(procps)
command -v ip >/dev/null 2>&1 || missing+=(iproute2) # process driver tests: ip netns, veth
if [ "${#missing[@]}" -gt 0 ]; then
  echo "scripts/test-deps.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi
bash jepsen/ci-deps.sh
