//! Fault injection for the proofs that the checkers bite: the switches the
//! `fault-shared-resource-version` (Jepsen) and `fault-restart-as-leader`
//! (the simulation) features add.
//!
//! Without the feature `shared_resource_version()` is a constant `false`.
//! With it, the fault is still off until the embedding binary turns it on at
//! start-up (the gateway: `OPENSHELL_FAULT=shared-resource-version`), so one
//! fault build serves every checker proof. When on, an applied object write
//! takes the log index as its resource version (the old, wrong rule: writes
//! batched into one entry share it).

#[cfg(feature = "fault-shared-resource-version")]
static SHARED_RESOURCE_VERSION: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Turns the shared-resource-version fault on or off.
#[cfg(feature = "fault-shared-resource-version")]
pub fn set_shared_resource_version(on: bool) {
    SHARED_RESOURCE_VERSION.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// True while the shared-resource-version fault is on.
#[cfg(feature = "fault-shared-resource-version")]
pub fn shared_resource_version() -> bool {
    SHARED_RESOURCE_VERSION.load(std::sync::atomic::Ordering::SeqCst)
}

/// Always false: this build has no fault injection.
#[cfg(not(feature = "fault-shared-resource-version"))]
pub const fn shared_resource_version() -> bool {
    false
}

#[cfg(feature = "fault-restart-as-leader")]
static RESTART_AS_LEADER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns the restart-as-leader fault on or off (the simulation's proof:
/// `sim --fault restart-as-leader`).
#[cfg(feature = "fault-restart-as-leader")]
pub fn set_restart_as_leader(on: bool) {
    RESTART_AS_LEADER.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// True while the restart-as-leader fault is on: `vote_after_restart`
/// keeps a node's own committed vote, so it restarts as leader over a log
/// that may have lost its unsynced tail (openraft 0.9 before the fix).
#[cfg(feature = "fault-restart-as-leader")]
pub fn restart_as_leader() -> bool {
    RESTART_AS_LEADER.load(std::sync::atomic::Ordering::SeqCst)
}

/// Always false: this build has no fault injection.
#[cfg(not(feature = "fault-restart-as-leader"))]
pub const fn restart_as_leader() -> bool {
    false
}
