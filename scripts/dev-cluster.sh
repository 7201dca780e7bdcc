#!/usr/bin/env bash
# Starts a local three-gateway cluster on loopback (no external services).
# Data lives under ${DATA_DIR:-./dev-data}; running it again resumes that data.
# Ctrl-C stops every process it started.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${DATA_DIR:-$PWD/dev-data}
cargo build --quiet --bin openshell-gateway
bin=target/debug/openshell-gateway
members="1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "stopped; data kept in $data"
}
trap cleanup EXIT INT TERM
mkdir -p "$data"
for id in 1 2 3; do
  "$bin" --node-id "$id" --listen "127.0.0.1:700$id" --data-dir "$data/gateway-$id" \
    --cluster-id openshell-dev --initial-members "$members" >"$data/gateway-$id.log" 2>&1 &
  pids+=($!)
done
echo "gateways: 127.0.0.1:7001 127.0.0.1:7002 127.0.0.1:7003 (data and logs in $data)"
echo "try:  grpcurl is not needed; the tests in gateway-plugin/tests show the API,"
echo "      and 'tail -f $data/gateway-1.log' shows the leader election."
echo "Ctrl-C stops the cluster."
wait
