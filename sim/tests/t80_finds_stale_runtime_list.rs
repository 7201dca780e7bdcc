//! The launcher runs in the simulation and the checks see what it does:
//! built with `fault-stale-runtime-list` (every gateway that does not lead
//! also runs a deposed leader's launcher passes as before issue 27: list,
//! stall, read the state through any node, fail as `RuntimeLost` every
//! recorded runtime the stale list misses, unfenced: the Jepsen t62 proof's
//! fault), some seed of the CI budget fails a healthy sandbox, seen on a
//! replica right as the `FailLaunch` applies.
//!
//! - given: the sim built with `--features faults`, the fault turned on
//! - when: seeds 0.. run until one fails (at most `SIM_SEEDS`, default 1000)
//! - then: one fails with `invariant violated: ... healthy sandbox failed
//!   ... RuntimeLost`, and the test prints how many seeds it took
//!
//! Without the feature the file is empty (see t40).
#![cfg(feature = "faults")]

#[test]
fn stale_runtime_list_is_found_within_the_seed_budget() {
    let budget = sim::seed_budget(1000).expect("SIM_SEEDS");
    sim::fault::set("stale-runtime-list").expect("a faults build");
    let failure = sim::first_failure(0..budget)
        .unwrap_or_else(|| panic!("no seed of 0..{budget} found the stale-runtime-list fault"));
    println!("found after {} seeds:\n{failure}", failure.seed + 1);
    assert!(
        failure.error.starts_with("invariant violated")
            && failure.error.contains("healthy sandbox failed")
            && failure.error.contains("RuntimeLost"),
        "seed {} failed for another reason than a healthy sandbox failed as lost: {}",
        failure.seed,
        failure.error
    );
}
