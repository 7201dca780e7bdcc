#!/usr/bin/env bash
# Runs tests again and again on a loaded machine, to find flaky ones before
# CI does: every test named runs N times in turn while BURNERS busy loops
# (default 2) keep the CPUs taken, and the script prints, per test, how
# many runs passed and failed, with the log of each failed run kept.
#
#   scripts/flake-loop.sh 20 supervisor:t32_batched_launches cli:t71_dev_runtimes
#   BURNERS=0 scripts/flake-loop.sh 5 gateway-plugin:t10_three_gateways
#   scripts/flake-loop.sh 3 --all-clusters     # every test that starts a cluster
#
# A test is `<package>:<test file>` (tests/<file>.rs of that package). Each
# run is `cargo test -p <package> --test <file>`, built once before the
# loop. Logs of failed runs go to $FLAKE_DIR (default target/flake-loop/).
# Exits 1 when any run failed. A flaky test is a bug report: read the log of
# the failed run and find the interleaving.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 2 ]; then
  sed -n '2,16p' "$0" >&2
  exit 2
fi
runs="$1"
shift
case "$runs" in
  '' | *[!0-9]*) echo "flake-loop: the run count must be a number, not '$runs'" >&2; exit 2 ;;
esac

tests=()
if [ "$1" = "--all-clusters" ]; then
  # Every integration test of the crates whose tests start gateways,
  # supervisors or clusters (each tests/tNN_*.rs file).
  for pkg in gateway-plugin supervisor cli openshell-client jepsen; do
    dir=$(cargo metadata --no-deps --format-version 1 |
      python3 -c "import json,sys; m=json.load(sys.stdin); print([p['manifest_path'] for p in m['packages'] if p['name']=='$pkg'][0])")
    for f in "$(dirname "$dir")"/tests/t[0-9]*.rs; do
      tests+=("$pkg:$(basename "$f" .rs)")
    done
  done
else
  tests=("$@")
fi

out="${FLAKE_DIR:-target/flake-loop}"
mkdir -p "$out"
for t in "${tests[@]}"; do
  case "$t" in
    *:*) ;;
    *) echo "flake-loop: '$t' is not <package>:<test file>" >&2; exit 2 ;;
  esac
  cargo test -p "${t%%:*}" --test "${t#*:}" --no-run --quiet
done

burners=()
stop_burners() { for p in "${burners[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_burners EXIT
for _ in $(seq 1 "${BURNERS:-2}"); do
  (while :; do :; done) &
  burners+=("$!")
done

declare -A passed failed
for t in "${tests[@]}"; do passed[$t]=0; failed[$t]=0; done
for i in $(seq 1 "$runs"); do
  for t in "${tests[@]}"; do
    log="$out/${t//:/-}-run$i.log"
    started=$(date +%s)
    if cargo test -p "${t%%:*}" --test "${t#*:}" --quiet >"$log" 2>&1; then
      passed[$t]=$((passed[$t] + 1))
      rm -f "$log"
      verdict=ok
    else
      failed[$t]=$((failed[$t] + 1))
      verdict="FAILED (log: $log)"
    fi
    echo "run $i/$runs $t: $verdict in $(($(date +%s) - started)) s"
  done
done

echo
printf '%-60s %6s %6s\n' test passed failed
any=0
for t in "${tests[@]}"; do
  printf '%-60s %6d %6d\n' "$t" "${passed[$t]}" "${failed[$t]}"
  [ "${failed[$t]}" -eq 0 ] || any=1
done
exit "$any"
