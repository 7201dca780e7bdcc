//! Determinism is the simulation's contract: the same seed gives the same
//! trace (every byte received, every entry applied, every fault), byte for
//! byte, twice in one process and in another process.
//!
//! - given: the scenario and a seed
//! - when: it runs twice here, and once in a child process (the `sim` binary)
//! - then: the three trace hashes are equal; another seed's differs

use std::process::Command;

const SEED: u64 = 29;

#[test]
fn a_seed_gives_the_same_trace_twice_and_in_another_process() {
    println!("--- step: run seed {SEED} twice in this process");
    let first = sim::run(SEED, false).unwrap_or_else(|f| panic!("{f}"));
    let second = sim::run(SEED, false).unwrap_or_else(|f| panic!("{f}"));
    assert!(
        first.events > 500,
        "a trace of {} events is too thin to prove anything",
        first.events
    );
    assert_eq!(
        first.hash, second.hash,
        "seed {SEED} gave two traces in one process"
    );
    assert_eq!(first.events, second.events);

    println!("--- step: run seed {SEED} in a child process");
    let child = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(["--seed", &SEED.to_string()])
        .output()
        .expect("run the sim binary");
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert!(child.status.success(), "the child failed: {stdout}");
    let expected = format!("seed {SEED} ok hash {} ", first.hash);
    assert!(
        stdout.lines().any(|l| l.starts_with(&expected)),
        "the child process gave another trace for seed {SEED}:\n{stdout}\nexpected a line starting {expected:?}"
    );

    println!("--- step: another seed gives another trace");
    let other = sim::run(SEED + 1, false).unwrap_or_else(|f| panic!("{f}"));
    assert_ne!(
        first.hash, other.hash,
        "the hash does not depend on the seed"
    );
}
