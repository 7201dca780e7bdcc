#!/usr/bin/env bash
# Builds every binary and starts the local dev system in the foreground:
# 3 gateways, 2 supervisors and demo sandboxes on loopback, no external
# services, secure (TLS on every gRPC port, tokens, a signing key: all
# generated once under ./openshell-dev/tls). Data under ./openshell-dev
# (running it again resumes it); `source openshell-dev/env` in another shell
# points openshell-pool at it. The leading gateway launches a sandbox runtime
# per sandbox under ./openshell-dev/runtimes (a network namespace each when run
# as root). Ctrl-C stops every process, runtimes included. Extra arguments go
# to `openshell-pool dev` (the `cli` crate, cli/src/dev/), which starts the
# gateway, supervisor and runtime binaries from its own directory: hence every
# binary is built.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --bins
exec "${CARGO_TARGET_DIR:-target}/debug/openshell-pool" dev "$@"
