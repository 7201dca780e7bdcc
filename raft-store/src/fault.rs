//! Fault injection for the proofs that the checkers bite: the switches the
//! `fault-shared-resource-version` (Jepsen), `fault-restart-as-leader` and
//! `fault-committed-as-log-id` (the simulation) features add.
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

#[cfg(feature = "fault-committed-as-log-id")]
static COMMITTED_AS_LOG_ID: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Turns the committed-as-log-id fault on or off (the simulation's proof:
/// `sim --fault committed-as-log-id`).
#[cfg(feature = "fault-committed-as-log-id")]
pub fn set_committed_as_log_id(on: bool) {
    COMMITTED_AS_LOG_ID.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// True while the committed-as-log-id fault is on:
/// `log_store::commit_index_at_start` decodes the stored `Option<LogId>`
/// as a bare `LogId` (the start-up bug fixed in `e97f0df`), so a restarted
/// node takes a commit index about 256 times the real one and never
/// becomes ready.
#[cfg(feature = "fault-committed-as-log-id")]
pub fn committed_as_log_id() -> bool {
    COMMITTED_AS_LOG_ID.load(std::sync::atomic::Ordering::SeqCst)
}

/// Always false: this build has no fault injection.
#[cfg(not(feature = "fault-committed-as-log-id"))]
pub const fn committed_as_log_id() -> bool {
    false
}
