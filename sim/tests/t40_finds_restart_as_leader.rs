//! The simulation bites: built with `fault-restart-as-leader` (a node
//! restarts as the leader its stored committed vote names, over a log that
//! lost its unsynced tail: openraft 0.9's behaviour before the
//! `vote_after_restart` fix), some seed of the CI budget fails a check.
//!
//! - given: the sim built with `--features faults`, the fault turned on
//! - when: seeds 0.. run until one fails (at most `SIM_SEEDS`, default 1000)
//! - then: one fails, with a check's words (lost write, not linearizable,
//!   replicas differ, or not live), and the test prints how many seeds it
//!   took
//!
//! Without the feature the file is empty: `cargo test -p sim` does not run
//! it. `scripts/test.sh` runs it with the feature (one release build serves
//! the seed budget, with every fault off, and this proof).
#![cfg(feature = "faults")]

#[test]
fn restart_as_leader_is_found_within_the_seed_budget() {
    let budget = sim::seed_budget(1000).expect("SIM_SEEDS");
    sim::fault::set("restart-as-leader").expect("a faults build");
    let failure = sim::first_failure(0..budget)
        .unwrap_or_else(|| panic!("no seed of 0..{budget} found the restart-as-leader fault"));
    println!("found after {} seeds:\n{failure}", failure.seed + 1);
    assert!(
        !failure.error.contains("panicked") && !failure.error.contains("cannot start"),
        "seed {} failed for another reason than a check: {}",
        failure.seed,
        failure.error
    );
}
