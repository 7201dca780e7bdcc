//! Replays the fuzzing corpus and every crash found through the same target
//! functions AFL++ runs (`fuzz::TARGETS`), under the same allocator cap, so
//! a decoder that regresses on any input the fuzzer ever kept fails CI.
//!
//! - given: `fuzz/corpus/<target>/*` (seeds and the minimized queue) and
//!   `fuzz/crashes/<target>/*` (inputs that crashed before their fix);
//! - when: each file runs through its target;
//! - then: no panic, no allocation over the cap (an abort), and the whole
//!   replay stays small and fast.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: fuzz::CappedAlloc = fuzz::CappedAlloc;

/// The corpus (and crashes) may not grow past this (brief: < 2 MB).
const MAX_CORPUS_BYTES: u64 = 2_000_000;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The files of `dir` (none when it does not exist), sorted, skipping
/// AFL++'s README.txt.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "README.txt"))
        .collect();
    out.sort();
    out
}

#[test]
fn every_corpus_file_and_crash_replays_without_panic() {
    let started = Instant::now();
    let mut total_bytes = 0u64;
    let mut replayed = 0usize;
    for kind in ["corpus", "crashes"] {
        let base = root().join(kind);
        // Every directory names a target: a renamed target must take its
        // corpus along, not leave it unreplayed.
        for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            assert!(
                fuzz::find(&name).is_some(),
                "{}: no target named {name:?}",
                entry.path().display()
            );
        }
        for target in fuzz::TARGETS {
            for file in files(&base.join(target.name)) {
                let bytes =
                    std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                total_bytes += bytes.len() as u64;
                eprintln!("--- {kind} {}: {}", target.name, file.display());
                (target.run)(&bytes);
                replayed += 1;
            }
        }
    }
    let elapsed = started.elapsed();
    eprintln!("replayed {replayed} files ({total_bytes} bytes) in {elapsed:?}");
    for target in fuzz::TARGETS {
        assert!(
            !files(&root().join("corpus").join(target.name)).is_empty(),
            "target {} has no corpus (run `fuzz-seeds`)",
            target.name
        );
    }
    assert!(
        total_bytes < MAX_CORPUS_BYTES,
        "the corpus holds {total_bytes} bytes, over {MAX_CORPUS_BYTES}: minimize it (scripts/fuzz.sh minimize)"
    );
    // The goal is < 10 s; the bound leaves room for a debug build on a
    // loaded 2-core machine.
    assert!(
        elapsed < Duration::from_secs(60),
        "replaying the corpus took {elapsed:?}"
    );
}

#[test]
fn the_seeds_replay_and_stay_in_the_corpus() {
    for seed in fuzz::seeds::all() {
        let target = fuzz::find(seed.target).unwrap_or_else(|| panic!("no target {}", seed.target));
        (target.run)(&seed.bytes);
        let path = root()
            .join("corpus")
            .join(seed.target)
            .join(format!("seed-{}", seed.name));
        assert!(
            path.is_file(),
            "{} is missing: run `cargo run -p fuzz --bin fuzz-seeds`",
            path.display()
        );
    }
}
