#!/usr/bin/env bash
# The metrics acceptance check of issue 18, end to end on a dev cluster:
#
# 1. installs Debian's `prometheus` (promtool and the server) if missing
#    (as root; without root and without it, fails naming the package);
# 2. starts `openshell-pool dev` (3 gateways, 2 supervisors, 3 demo
#    sandboxes) on its own ports and data directory, creates two more
#    sandboxes, builds a snapshot, drains supervisor s1 and cancels the
#    drain, so the pool and snapshot metrics have events;
# 3. runs `promtool check metrics` on every gateway's and supervisor's
#    /metrics (the gateway's HTTP port serves /metrics without a token: it
#    holds nothing secret, gateway-plugin/src/ports.rs);
# 4. starts Debian's Prometheus (temporary directory, a free port, 1 s
#    scrapes of all five), waits for scrapes, and runs every `expr` of the
#    Grafana dashboard (helm/openshell-gateway/dashboards/openshell.json)
#    through /api/v1/query, Grafana's variables replaced ($__rate_interval
#    by 30s, $__range by 10m); it fails naming every query that returns no
#    series or only NaN.
#
# Everything it started is stopped on exit. Usage:
#   bash scripts/check-metrics.sh            # builds the binaries first
#   BASE_PORT=27001 bash scripts/check-metrics.sh
#   CHECK_METRICS_HOLD=600 bash scripts/check-metrics.sh   # on failure, keep
#                                           # everything up 600 s to look
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_PORT=${BASE_PORT:-27001}
TARGET=${CARGO_TARGET_DIR:-target}
BIN=$TARGET/debug
DASHBOARD=helm/openshell-gateway/dashboards/openshell.json

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "check-metrics: promtool/prometheus missing: run as root, or apt-get install -y prometheus" >&2
    exit 1
  fi
  echo "check-metrics: installing Debian's prometheus"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends prometheus
  # The package starts its own server where an init runs it; this check
  # starts its own on its own port.
  service prometheus stop >/dev/null 2>&1 || true
fi
echo "check-metrics: $(promtool --version 2>&1 | head -1)"

cargo build -q --bin openshell-pool --bin openshell-gateway --bin openshell-supervisor \
  --bin openshell-sandbox-runtime

WORK=$(mktemp -d /tmp/check-metrics.XXXXXX)
DEV_PID=""
PROM_PID=""
cleanup() {
  if [ -n "$PROM_PID" ]; then kill "$PROM_PID" 2>/dev/null || true; wait "$PROM_PID" 2>/dev/null || true; fi
  if [ -n "$DEV_PID" ]; then
    # dev stops every process it started on SIGINT.
    kill -INT "$DEV_PID" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$DEV_PID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$DEV_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

for offset in 0 1 2 10 11 12 100 101 102 200 201; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$((BASE_PORT + offset))") 2>/dev/null; then
    echo "check-metrics: port $((BASE_PORT + offset)) is in use: set BASE_PORT" >&2
    exit 1
  fi
done

echo "check-metrics: starting a dev cluster on ports from $BASE_PORT (data in $WORK/dev)"
"$BIN/openshell-pool" dev --data-dir "$WORK/dev" --base-port "$BASE_PORT" >"$WORK/dev.log" 2>&1 &
DEV_PID=$!
GATEWAYS=("127.0.0.1:$((BASE_PORT + 100))" "127.0.0.1:$((BASE_PORT + 101))" "127.0.0.1:$((BASE_PORT + 102))")
SUPERVISORS=("127.0.0.1:$((BASE_PORT + 200))" "127.0.0.1:$((BASE_PORT + 201))")

pool() { "$BIN/openshell-pool" "$@"; }
for _ in $(seq 1 240); do
  if [ -f "$WORK/dev/env" ] && grep -q "cluster is up" "$WORK/dev.log"; then break; fi
  kill -0 "$DEV_PID" 2>/dev/null || { cat "$WORK/dev.log" >&2; echo "check-metrics: dev exited" >&2; exit 1; }
  sleep 0.5
done
grep -q "cluster is up" "$WORK/dev.log" || { cat "$WORK/dev.log" >&2; echo "check-metrics: dev did not come up" >&2; exit 1; }
# shellcheck disable=SC1091
source "$WORK/dev/env"

# Every supervisor ready and every demo sandbox assigned.
for _ in $(seq 1 120); do
  ready=0
  for s in "${SUPERVISORS[@]}"; do
    curl -fsS "http://$s/readyz" >/dev/null 2>&1 && ready=$((ready + 1))
  done
  [ "$ready" = 2 ] && break
  sleep 0.5
done
echo "check-metrics: supervisors ready: $ready of 2"

failed=0
PROM_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
quote() { printf "'%s'," "$@" | sed 's/,$//'; }
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: openshell-gateway
    static_configs:
      - targets: [$(quote "${GATEWAYS[@]}")]
  - job_name: openshell-supervisor
    static_configs:
      - targets: [$(quote "${SUPERVISORS[@]}")]
EOF
echo "check-metrics: starting prometheus on 127.0.0.1:$PROM_PORT"
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!
PROM="http://127.0.0.1:$PROM_PORT"
for _ in $(seq 1 60); do
  curl -fsS "$PROM/-/ready" >/dev/null 2>&1 && break
  kill -0 "$PROM_PID" 2>/dev/null || { cat "$WORK/prometheus.log" >&2; exit 1; }
  sleep 0.5
done
# Every target scraped (Prometheus applies discovered targets on a 5 s
# ticker) and a few scrapes more before the events, so that every range
# sees them happen.
up_targets() {
  curl -fsS "$PROM/api/v1/targets" 2>/dev/null |
    python3 -c 'import json, sys; print(sum(t["health"] == "up" for t in json.load(sys.stdin)["data"]["activeTargets"]))' 2>/dev/null ||
    echo 0
}
for _ in $(seq 1 120); do
  [ "$(up_targets)" = 5 ] && break
  sleep 0.5
done
echo "check-metrics: prometheus scrapes $(up_targets) of 5 targets"
sleep 3
echo "check-metrics: creating 2 sandboxes, building a snapshot, draining s1 and cancelling"
pool sandbox create -- sleep 600 >/dev/null
pool sandbox create -- sleep 600 >/dev/null
pool raft snapshot >/dev/null
op=$(pool -o json pool drain s1 | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d.get("id") or d.get("operation_id") or d["operation"]["id"])')
sleep 3
pool pool cancel "$op" >/dev/null
pool pool status | head -20

# Calls keep coming (ticks, heartbeats, raft appends) while Prometheus
# scrapes.
sleep 20
echo "check-metrics: promtool check metrics"
for target in "${GATEWAYS[@]}" "${SUPERVISORS[@]}"; do
  curl -fsS "http://$target/metrics" >"$WORK/metrics.txt"
  if promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.txt" 2>&1; then
    echo "  ok      $target/metrics ($(grep -c '^# TYPE' "$WORK/metrics.txt") families)"
  else
    echo "  FAILED  $target/metrics:"
    sed 's/^/    /' "$WORK/promtool.txt"
    failed=1
  fi
done

curl -fsS "$PROM/api/v1/targets" | python3 -c '
import json, sys
for t in json.load(sys.stdin)["data"]["activeTargets"]:
    print("  target", t["scrapeUrl"], t["health"], t.get("lastError", ""))'

echo "check-metrics: every query of $DASHBOARD"
python3 - "$DASHBOARD" "$PROM" <<'EOF' || failed=1
import json, math, sys, urllib.parse, urllib.request

dashboard, prom = sys.argv[1], sys.argv[2]

def exprs(panels):
    for p in panels:
        yield from exprs(p.get("panels", []))
        for t in p.get("targets", []):
            yield p["title"], t["expr"]

variables = {"$__rate_interval": "30s", "$__range": "10m", "$__interval": "1s"}
bad = 0
total = 0
for title, expr in exprs(json.load(open(dashboard))["panels"]):
    total += 1
    query = expr
    for k, v in variables.items():
        query = query.replace(k, v)
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        answer = json.load(urllib.request.urlopen(url, timeout=10))
    except Exception as e:  # an HTTP 400 names a malformed query
        print(f"  FAILED  [{title}] {expr}: {e}")
        bad += 1
        continue
    result = answer["data"]["result"]
    values = [float(r["value"][1]) for r in result] if answer["data"]["resultType"] == "vector" else []
    if answer["data"]["resultType"] == "scalar":
        values = [float(answer["data"]["result"][1])]
    real = [v for v in values if not math.isnan(v)]
    if not real:
        print(f"  FAILED  [{title}] {expr}: {'no series' if not values else 'only NaN'}")
        bad += 1
    else:
        shown = ", ".join(f"{v:g}" for v in real[:4]) + (" ..." if len(real) > 4 else "")
        print(f"  ok      [{title}] {expr} -> {len(real)} series: {shown}")
print(f"check-metrics: {total - bad} of {total} dashboard queries answered with data")
sys.exit(1 if bad else 0)
EOF

if [ "$failed" != 0 ]; then
  echo "check-metrics: FAILED" >&2
  if [ -n "${CHECK_METRICS_HOLD:-}" ]; then
    echo "check-metrics: CHECK_METRICS_HOLD: Prometheus stays on $PROM and the cluster up for $CHECK_METRICS_HOLD s" >&2
    sleep "$CHECK_METRICS_HOLD"
  fi
  exit 1
fi
echo "check-metrics: passed"
