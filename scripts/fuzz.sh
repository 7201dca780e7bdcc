#!/usr/bin/env bash
# Coverage-guided fuzzing of the decoders that face the network or the disk,
# with AFL++ through cargo-afl on the stable toolchain (fuzz/README.md).
#
#   scripts/fuzz.sh install            cargo-afl 0.18 (it builds its own AFL++)
#   scripts/fuzz.sh build              the instrumented harness (target/afl)
#   scripts/fuzz.sh list               the targets
#   scripts/fuzz.sh <target> [SECONDS] fuzz one target (default 600 s)
#   scripts/fuzz.sh all [SECONDS]      every target in turn, SECONDS each
#   scripts/fuzz.sh minimize <target>  merge the run's queue into the corpus (afl-cmin)
#   scripts/fuzz.sh replay             the corpus and crash replay test (cargo test)
#
# A run's findings land in target/afl-out/<target>/default/{crashes,hangs};
# crashes are copied to fuzz/crashes/<target>/ (replayed by CI once fixed).
# Every step installs what it needs first; all are idempotent. AFL++ takes one
# core per run: runs go one after the other, never in parallel.
set -euo pipefail
cd "$(dirname "$0")/.."

AFL_TARGET_DIR="${AFL_TARGET_DIR:-$PWD/target/afl}"
OUT_DIR="${AFL_OUT_DIR:-$PWD/target/afl-out}"
HARNESS="$AFL_TARGET_DIR/release/fuzz-afl"
CARGO_AFL_VERSION="^0.18"

install() {
  # make and a C compiler build AFL++ from the sources cargo-afl ships.
  if ! command -v make >/dev/null || ! command -v cc >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
      apt-get install -y --no-install-recommends make gcc libc6-dev
    else
      echo "fuzz.sh: make and cc are needed (apt-get install make gcc)" >&2
      exit 1
    fi
  fi
  if ! cargo afl --version >/dev/null 2>&1; then
    cargo install cargo-afl --version "$CARGO_AFL_VERSION" --locked
  fi
  # Builds AFL++ for this rustc unless it was built already (cargo-afl
  # then refuses with "already built": that is success).
  local log
  if ! log="$(cargo afl config --build 2>&1)"; then
    if ! grep -q "already built" <<<"$log"; then
      echo "$log" >&2
      exit 1
    fi
  fi
}

build() {
  # FUZZ_NO_BUILD=1: use the harness already in target/afl as it is.
  if [ "${FUZZ_NO_BUILD:-0}" = 1 ] && [ -x "$HARNESS" ]; then
    return 0
  fi
  install
  CARGO_TARGET_DIR="$AFL_TARGET_DIR" cargo afl build --release --locked \
    -p fuzz --features afl --bin fuzz-afl
}

targets() {
  "$HARNESS" --list | cut -f1
}

# fuzz TARGET SECONDS: one run of afl-fuzz, then its numbers in one line.
fuzz_one() {
  local target="$1" seconds="$2"
  local out="$OUT_DIR/$target"
  rm -rf "$out"
  mkdir -p "$out"
  echo "fuzz.sh: $target for ${seconds}s (output $out)"
  # AFL_SKIP_CPUFREQ / AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES: no root
  # tuning of the host (governor, core_pattern) is assumed. AFL_NO_AFFINITY:
  # the kernel places the run (binding fails when other builds hold the cores).
  AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 \
    AFL_SKIP_CRASHES=1 AFL_QUIET=1 AFL_NO_AFFINITY=1 \
    cargo afl fuzz -V "$seconds" -t 1000 -i "fuzz/corpus/$target" -o "$out" \
    -- "$HARNESS" "$target" >"$out/afl.log" 2>&1 || {
      tail -20 "$out/afl.log" >&2
      return 1
    }
  local stats="$out/default/fuzzer_stats"
  local execs crashes hangs run_time
  execs="$(awk -F' *: *' '$1=="execs_done"{print $2}' "$stats")"
  crashes="$(awk -F' *: *' '$1=="saved_crashes"{print $2}' "$stats")"
  hangs="$(awk -F' *: *' '$1=="saved_hangs"{print $2}' "$stats")"
  run_time="$(awk -F' *: *' '$1=="run_time"{print $2}' "$stats")"
  echo "fuzz.sh: $target: execs=$execs time=${run_time}s crashes=$crashes hangs=$hangs"
  local found=0
  for f in "$out"/default/crashes/id:* "$out"/default/hangs/id:*; do
    [ -f "$f" ] || continue
    mkdir -p "fuzz/crashes/$target"
    cp "$f" "fuzz/crashes/$target/$(basename "$(dirname "$f")")-$(sha1sum "$f" | cut -c1-12)"
    found=1
  done
  if [ "$found" = 1 ]; then
    echo "fuzz.sh: $target: findings copied to fuzz/crashes/$target/ (replay: scripts/fuzz.sh replay)"
  fi
}

minimize() {
  local target="$1"
  local queue="$OUT_DIR/$target/default/queue"
  [ -d "$queue" ] || { echo "fuzz.sh: no run of $target in $OUT_DIR" >&2; exit 1; }
  local merged="$OUT_DIR/$target/merged" min="$OUT_DIR/$target/min"
  rm -rf "$merged" "$min"
  mkdir -p "$merged"
  cp "fuzz/corpus/$target"/* "$queue"/id:* "$merged"/ 2>/dev/null || true
  AFL_SKIP_CPUFREQ=1 cargo afl cmin -t 1000 -i "$merged" -o "$min" -- "$HARNESS" "$target" >/dev/null
  # Seeds stay (the replay test checks them); what cmin kept joins them,
  # named by content so re-runs do not duplicate.
  for f in "$min"/*; do
    case "$(basename "$f")" in seed-*) continue ;; esac
    cp "$f" "fuzz/corpus/$target/min-$(sha1sum "$f" | cut -c1-12)"
  done
  echo "fuzz.sh: $target corpus: $(ls "fuzz/corpus/$target" | wc -l) files, $(du -sb "fuzz/corpus/$target" | cut -f1) bytes"
}

cmd="${1:-}"
case "$cmd" in
  install) install ;;
  build) build ;;
  list) build >/dev/null; "$HARNESS" --list ;;
  replay) cargo test -p fuzz --test t10_corpus_replay ;;
  minimize) build >/dev/null; minimize "${2:?target}" ;;
  all)
    build
    for t in $(targets); do fuzz_one "$t" "${2:-600}"; done
    ;;
  ""|-h|--help) sed -n '2,17p' "$0" ;;
  *)
    build
    targets | grep -qx "$cmd" || { echo "fuzz.sh: no target $cmd (scripts/fuzz.sh list)" >&2; exit 2; }
    fuzz_one "$cmd" "${2:-600}"
    ;;
esac
