#!/usr/bin/env bash
# Debian packages the jepsen harness and its tests need: iproute2 (ip netns,
# veth, bridge), nftables (partitions), iptables (packet loss), faketime
# (libfaketime for the clock nemesis). Idempotent: installs only what is
# missing, and runs apt-get only then.
set -euo pipefail

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || missing+=(faketime)

if [ "${#missing[@]}" -eq 0 ]; then
  echo "jepsen/ci-deps.sh: all tools present"
  exit 0
fi
echo "jepsen/ci-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}"
