#!/usr/bin/env bash
# No import cycle between the modules (files) of a crate (issue 28): a file
# that imports a file importing it back cannot be read, moved or tested on
# its own. Checked with cargo-cycles (scripts/test-deps.sh installs it) over
# the whole workspace; it names each cycle with the file and line of every
# import in it.
#
# cargo-cycles follows `use` declarations only: import what another file
# defines with `use`, not with a full path inside code, so the check sees it
# (docs/architecture.md, "Import circles").
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-cycles >/dev/null 2>&1; then
  echo "scripts/check-cycles.sh: cargo-cycles is not installed: run scripts/test-deps.sh" >&2
  exit 1
fi
if report="$(cargo-cycles 2>&1)"; then
  echo "scripts/check-cycles.sh: no import cycle in any crate"
  exit 0
fi
if grep -q 'circular module dependencies' <<<"$report"; then
  echo "scripts/check-cycles.sh: import cycles (file A imports B, which imports A back);" >&2
  echo "break each by moving what both need into a file that neither imports back:" >&2
fi
# Otherwise not a module cycle: a cycle between crates, or the tool failed.
echo "$report" >&2
exit 1
