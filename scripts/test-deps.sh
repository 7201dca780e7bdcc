#!/usr/bin/env bash
# What the test suite needs beyond the Rust toolchain, from Debian's packages.
# Idempotent: checks each tool first and runs apt-get only for what is missing.
# Needs root; scripts/test.sh calls it when it runs as root.
#
# - the Jepsen harness (network namespaces, partitions, packet loss, clock
#   skew): iproute2, nftables, iptables, faketime (jepsen/ci-deps.sh);
# - process tests find and signal processes with pgrep/pkill/kill: procps;
# - the bench smoke test (jepsen t39): postgresql-15 and etcd-server;
# - lazyfs and the Jepsen power-cut nemesis mount FUSE: fuse3 (fusermount3);
# - the metrics test (gateway-plugin t108) runs `promtool check metrics` on
#   every /metrics, and scripts/check-metrics.sh runs Prometheus itself:
#   prometheus (promtool and the server);
# - the Kubernetes schema test (sandbox-driver t11) validates every Pod and
#   Secret the driver would create with `kubernetes-validate` (PyPI), in a
#   venv at /opt/openshell-test-venv (Debian 12 refuses a system pip install);
# - the Helm chart tests (helm/chart-tests) render and lint the chart with
#   Helm's own library, `helm-python-sdk` (PyPI; no helm binary exists in
#   Debian or on PyPI), in the same venv;
# - the import-cycle check (scripts/check-cycles.sh, run by .ci/run):
#   cargo-cycles (crates.io), built by `cargo install`.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v pgrep >/dev/null 2>&1 || missing+=(procps)
command -v ip >/dev/null 2>&1 || missing+=(iproute2) # process driver tests: ip netns, veth
# lazyfs (power-cut tests): fusermount3 and the kernel's FUSE helpers. The
# fuser crate is built without libfuse, so no -dev package is needed.
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
# The comparative bench's smoke test (jepsen t39) starts PostgreSQL 15 and a
# 3-member etcd of its own (scripts/bench.sh installs the same packages).
[ -x /usr/lib/postgresql/15/bin/postgres ] || missing+=(postgresql-15)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "scripts/test-deps.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
  # The packages start their own services where an init runs them: the
  # tests start their own servers on their own ports.
  service etcd stop >/dev/null 2>&1 || true
  service postgresql stop >/dev/null 2>&1 || true
  service prometheus stop >/dev/null 2>&1 || true
fi

# kubernetes-validate, pinned; the t11 test looks for
# /opt/openshell-test-venv/bin/kubernetes-validate, then $PATH.
KUBE_VALIDATE_VENV=${KUBE_VALIDATE_VENV:-/opt/openshell-test-venv}
KUBE_VALIDATE_VERSION=1.37.0
if ! "$KUBE_VALIDATE_VENV/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$KUBE_VALIDATE_VERSION"; then
  echo "scripts/test-deps.sh: installing kubernetes-validate $KUBE_VALIDATE_VERSION in $KUBE_VALIDATE_VENV"
  if ! python3 -m venv "$KUBE_VALIDATE_VENV" 2>/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-venv python3-pip
    python3 -m venv "$KUBE_VALIDATE_VENV"
  fi
  "$KUBE_VALIDATE_VENV/bin/pip" install -q "kubernetes-validate==$KUBE_VALIDATE_VERSION"
fi

# helm-python-sdk, pinned, in the same venv (helm/chart-tests/render.py
# imports helm_python from /opt/openshell-test-venv/bin/python).
HELM_PYTHON_VERSION=0.2.2
if ! "$KUBE_VALIDATE_VENV/bin/python" -c "import helm_python, sys; sys.exit(helm_python.__version__ != '$HELM_PYTHON_VERSION')" 2>/dev/null; then
  echo "scripts/test-deps.sh: installing helm-python-sdk $HELM_PYTHON_VERSION in $KUBE_VALIDATE_VENV"
  "$KUBE_VALIDATE_VENV/bin/pip" install -q "helm-python-sdk==$HELM_PYTHON_VERSION"
fi

# cargo-cycles, pinned: import cycles between the modules (files) of every
# workspace crate. Built from source once; a later run finds it.
CARGO_CYCLES_VERSION=0.2.0
if ! cargo-cycles --version 2>/dev/null | grep -q "$CARGO_CYCLES_VERSION"; then
  echo "scripts/test-deps.sh: installing cargo-cycles $CARGO_CYCLES_VERSION"
  CARGO_INCREMENTAL=0 cargo install --locked --quiet cargo-cycles --version "$CARGO_CYCLES_VERSION"
fi

bash jepsen/ci-deps.sh
