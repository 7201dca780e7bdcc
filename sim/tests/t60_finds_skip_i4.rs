//! The pool checks bite: built with `fault-skip-i4` (apply takes a sandbox
//! over from an owner whose member record is still active, and the
//! coordinator calls an active member dead at half its heartbeat TTL: the
//! Jepsen t60 proof's fault), some seed of the CI budget fails with an I4
//! violation, found on a replica right after the takeover applied.
//!
//! - given: the sim built with `--features faults`, the fault turned on
//! - when: seeds 0.. run until one fails (at most `SIM_SEEDS`, default 1000)
//! - then: one fails with `invariant violated: ... I4 ...`, and the test
//!   prints how many seeds it took
//!
//! Without the feature the file is empty (see t40).
#![cfg(feature = "faults")]

#[test]
fn skip_i4_is_found_within_the_seed_budget() {
    let budget = sim::seed_budget(1000).expect("SIM_SEEDS");
    sim::fault::set("skip-i4").expect("a faults build");
    let failure = sim::first_failure(0..budget)
        .unwrap_or_else(|| panic!("no seed of 0..{budget} found the skip-i4 fault"));
    println!("found after {} seeds:\n{failure}", failure.seed + 1);
    assert!(
        failure.error.starts_with("invariant violated") && failure.error.contains("I4"),
        "seed {} failed for another reason than an I4 violation: {}",
        failure.seed,
        failure.error
    );
}
