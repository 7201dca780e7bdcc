#!/usr/bin/env bash
# The soak of issue 16 (a documented command, not part of CI; about 35 min):
#
#   scripts/soak.sh                      # 30 min, 100,000 sandboxes, 50 members
#   scripts/soak.sh --duration-s 180 --sandboxes 6000   # a short one
#
# Three release-built gateways in network namespaces (the Jepsen harness,
# TLS, no nemesis) with --retention-ticks 240 (1 min at the 250 ms tick);
# 50 scripted members attached over TLS with their own credentials, each
# leaving (drain, leave or crash) and coming back under a new id every 2-4
# min; 100,000 sandboxes created and deleted through PoolAdmin at most 500
# live at once. Samples every gateway's RSS, snapshot file, applied state
# and data directory every 10 s, then prints the verdict (flat or not after
# the first retention period) and writes samples.csv, samples.json,
# verdict.md and soak.svg into the soak directory (OUT, default
# jepsen/runs/soak-<timestamp>). Extra arguments go to `openshell-bench
# soak` (see its --help). Needs root (network namespaces): run
# jepsen/ci-deps.sh once. Exit code: 0 flat, 1 not flat, 2 not carried out.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/soak.sh: run as root (network namespaces)" >&2
  exit 2
fi
target=${CARGO_TARGET_DIR:-target}
cargo build --release -p gateway-plugin --bin openshell-gateway
cargo build --release -p openshell-bench --bin openshell-bench
out=${OUT:-jepsen/runs/soak-$(date -u +%Y%m%dT%H%M%SZ)}
exec "$target/release/openshell-bench" soak \
  --gateway-bin "$target/release/openshell-gateway" \
  --out "$out" "$@"
