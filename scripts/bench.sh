#!/usr/bin/env bash
# The comparative benchmark of issue 17 (a documented command, not part of CI;
# about 10 min for the default 3 runs, then about 6 min of failover faults):
#
#   scripts/bench.sh                         # 3 runs, 1/8/64 clients, 2 s + 8 s per level
#   scripts/bench.sh --runs 1 --secs 3       # a quick look
#
# Installs what it needs from Debian when missing (postgresql-15,
# etcd-server, etcd-client) and stops the services those packages start,
# builds the release gateway and openshell-bench into $CARGO_TARGET_DIR (default
# target/), then runs `openshell-bench compare --runs 3`: PostgreSQL 15, a
# 3-member etcd, 3 gateways, the file limit and the in-process raft group,
# one after another, all on loopback and plaintext, each at its default
# timeouts, each with fresh data directories in a tempdir. Results go to
# docs/benchmarks/compare/ (run-<k>.json, summary.json, summary.md) and
# docs/benchmarks/compare.svg (override with --out / --plot). Extra
# arguments go to `openshell-bench compare` (see its --help). Run as root
# (apt-get; PostgreSQL then runs as the `postgres` user).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
[ -x /usr/lib/postgresql/15/bin/postgres ] || missing+=(postgresql-15)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/bench.sh: missing ${missing[*]}; run as root to install them" >&2
    exit 2
  fi
  echo "scripts/bench.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi
# The packages start their own services (on systems with an init that runs
# them): stop them so the bench's own servers have the machine to themselves.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now etcd.service postgresql.service 2>/dev/null || true
else
  service etcd stop 2>/dev/null || true
  service postgresql stop 2>/dev/null || true
fi

target=${CARGO_TARGET_DIR:-target}
cargo build --release -p gateway-plugin --bin openshell-gateway
cargo build --release -p openshell-bench --bin openshell-bench
echo "scripts/bench.sh: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
# The in-process raft group logs through openshell-bench's subscriber: keep it quiet.
export RUST_LOG=${RUST_LOG:-warn,openraft=error}
"$target/release/openshell-bench" compare \
  --gateway-bin "$target/release/openshell-gateway" "$@"
# Then the failover windows (kill -9, SIGSTOP, transfer; about 6 min) into
# docs/benchmarks/compare/failover.json; BENCH_SKIP_FAILOVER=1 skips them.
if [ "${BENCH_SKIP_FAILOVER:-0}" != 1 ]; then
  "$target/release/openshell-bench" failover \
    --gateway-bin "$target/release/openshell-gateway"
fi
