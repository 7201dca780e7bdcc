//! A gateway's readiness after a restart is checked, and through the real
//! start-up decode of the stored commit record: built with
//! `fault-committed-as-log-id` (start-up reads the stored `Option<LogId>`
//! as a bare `LogId`, one byte off: the bug fixed in `e97f0df`, which kept a
//! restarted gateway out of service, waiting for a commit index about 256
//! times the real one), some seed of the CI budget ends with a member that
//! never becomes ready.
//!
//! - given: the sim built with `--features faults`, the fault turned on
//! - when: seeds 0.. run until one fails (at most `SIM_SEEDS`, default 1000)
//! - then: one fails because a restarted member is not ready after healing,
//!   waiting for entries "committed at start-up" that do not exist, and the
//!   test prints how many seeds it took
//!
//! Without the feature the file is empty (see t40).
#![cfg(feature = "faults")]

#[test]
fn committed_as_log_id_is_found_within_the_seed_budget() {
    let budget = sim::seed_budget(1000).expect("SIM_SEEDS");
    sim::fault::set("committed-as-log-id").expect("a faults build");
    let failure = sim::first_failure(0..budget)
        .unwrap_or_else(|| panic!("no seed of 0..{budget} found the committed-as-log-id fault"));
    println!("found after {} seeds:\n{failure}", failure.seed + 1);
    assert!(
        failure.error.contains("ready did not happen")
            && failure.error.contains("committed at start-up"),
        "seed {} failed for another reason than a member waiting for its start-up commit index: {}",
        failure.seed,
        failure.error
    );
}
