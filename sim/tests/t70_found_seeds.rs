//! Every seed that found a bug, run again: each must pass now.
//!
//! A seed's schedule is what it is for the code of its time: when the
//! workload or the swarm changes, the same seed draws another run, so each
//! bug also has a real-process test that pins its behaviour (named below).
//! The seeds stay as cheap extra runs of once-failing schedules.
//!
//! - given: the seeds the simulation failed on, each with what it found
//! - when: each runs
//! - then: each passes

/// (seed, what it found, the fix and its real-process test).
const FOUND: &[(u64, &str)] = &[
    (
        12,
        "a gateway removed from the group while running kept its supervisors \
         attached until they expired (fixed: a gateway that writes none of its \
         supervisors' heartbeats for half the TTL sends them away; \
         gateway-plugin/tests/t122_unheard_supervisors_sent_away.rs)",
    ),
    (1417, NOT_APPLIED),
    (1481, NOT_APPLIED),
    (1821, NOT_APPLIED),
    (10391, NOT_APPLIED),
    (10906, NOT_APPLIED),
    (11387, NOT_APPLIED),
    (13234, NOT_APPLIED),
];

/// What the long run's seeds of 42ada16 found (each fails with the fix
/// below turned off, each passes with it).
const NOT_APPLIED: &str = "a gateway removed from the group while running still \
     forwarded its supervisors' heartbeats, which committed, so they stayed \
     active, but its own state no longer moved, so it never showed them their \
     takeovers, which stayed recovering (fixed: a gateway that has not applied \
     a heartbeat batch half a TTL after it was written sends its supervisors \
     away; gateway-plugin/src/hub/heartbeats.rs BeatsHealth)";

#[test]
fn every_seed_that_found_a_bug_passes() {
    for (seed, found) in FOUND {
        if let Err(failure) = sim::run(*seed, false) {
            panic!("seed {seed} (it found: {found}) fails again:\n{failure}");
        }
    }
}
