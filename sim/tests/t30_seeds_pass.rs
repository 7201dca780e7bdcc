//! The three-node scenario passes its checks for a range of seeds: every
//! acknowledged write is read back linearizably on every node after a
//! crash and restart and a partition and its healing, and all replicas
//! reach the same state at the same applied index.
//!
//! - given: seeds 0..`SIM_SEEDS` (default 20)
//! - when: each runs the scenario
//! - then: none fails; a failure prints the seed's trace tail and the
//!   command that replays it

#[test]
fn the_scenario_holds_for_every_seed() {
    let seeds: u64 = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let mut failures = Vec::new();
    for seed in 0..seeds {
        match sim::run(seed, false) {
            Ok(outcome) => assert_eq!(
                outcome.acked, 15,
                "seed {seed}: every phase's writes acknowledged"
            ),
            Err(failure) => failures.push(failure.to_string()),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {seeds} seeds failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
