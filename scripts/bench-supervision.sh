#!/usr/bin/env bash
# Measures supervision at DEFAULT gateway settings (tick 250 ms, heartbeat TTL
# 2 s): kill -> re-supervised, drain of 2 sessions, and the longest workload
# counter stall during a gateway leader kill. Runs each end-to-end scenario
# RUNS times (default 5) and prints every sample and the median.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
export OPENSHELL_BENCH_DEFAULTS=1
cargo build --quiet -p gateway-plugin -p supervisor --bins
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
measure() { # test-name regex
  local test=$1 pattern=$2 out samples=()
  for i in $(seq 1 "$runs"); do
    out=$(cargo test --quiet -p supervisor --test "$test" -- --nocapture 2>&1) || { echo "$out" >&2; exit 1; }
    samples+=("$(echo "$out" | grep -oE "$pattern" | grep -oE '[0-9]+ ms' | grep -oE '[0-9]+' | head -1)")
  done
  echo "$test: samples ${samples[*]} ms; median $(printf '%s\n' "${samples[@]}" | median) ms"
}
measure t20_supervisor_kill 'kill -> re-supervised: [0-9]+ ms'
measure t21_drain_scale 'drain of 2 sessions: [0-9]+ ms'
measure t22_gateway_leader_kill 'stall during the leader kill: [0-9]+ ms'
