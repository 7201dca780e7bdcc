#!/usr/bin/env bash
# Size limits for non-test code (issue 10): no source file over 700 lines,
# counted up to its `#[cfg(test)]` module. (Functions over 100 lines are
# caught by clippy's too_many_lines in .ci/run.) Test files under tests/ are
# exempt.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=700
status=0
while IFS= read -r file; do
  [ -f "$file" ] || continue
  lines="$(awk '/^#\[cfg\(test\)\]/ { exit } { n++ } END { print n + 0 }' "$file")"
  if [ "$lines" -gt "$limit" ]; then
    echo "$file: $lines non-test lines (limit $limit): split it by concept" >&2
    status=1
  fi
done < <(git ls-files --cached --others --exclude-standard -- '*/src/*.rs' '*/benches/*.rs')
exit "$status"
