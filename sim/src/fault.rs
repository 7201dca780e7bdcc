//! The fixed bugs a fault build (`--features faults`) can turn back on, to
//! prove the simulation finds them. Each is off until a run turns it on; the
//! switches are process-wide (one simulation at a time per process).

/// The faults this crate knows, by the name `sim --fault` takes.
pub const NAMES: &[&str] = &[
    "restart-as-leader",
    "skip-i4",
    "stale-runtime-list",
    "committed-as-log-id",
];

/// Why a fault cannot be turned on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FaultError {
    /// Not one of [`NAMES`].
    #[error(
        "unknown fault '{0}' (known: restart-as-leader, skip-i4, stale-runtime-list, \
         committed-as-log-id)"
    )]
    Unknown(String),
    /// This build was made without `--features faults`.
    #[error("fault '{0}' needs a build with `--features faults`")]
    NotBuilt(String),
}

/// Turns on the fault `name`.
///
/// # Errors
/// An unknown name, or a build without the fault features.
pub fn set(name: &str) -> Result<(), FaultError> {
    if !NAMES.contains(&name) {
        return Err(FaultError::Unknown(name.to_string()));
    }
    #[cfg(feature = "faults")]
    {
        match name {
            "restart-as-leader" => raft_store::fault::set_restart_as_leader(true),
            "skip-i4" => pool::fault::set_skip_i4(true),
            "committed-as-log-id" => raft_store::fault::set_committed_as_log_id(true),
            _ => gateway_plugin::fault::set_stale_runtime_list(true),
        }
        Ok(())
    }
    #[cfg(not(feature = "faults"))]
    Err(FaultError::NotBuilt(name.to_string()))
}

/// The faults turned on, as `sim` arguments (for the replay command).
pub fn replay_args() -> String {
    let mut args = String::new();
    if raft_store::fault::restart_as_leader() {
        args.push_str(" --fault restart-as-leader");
    }
    if pool::fault::skip_i4() {
        args.push_str(" --fault skip-i4");
    }
    if gateway_plugin::fault::stale_runtime_list() {
        args.push_str(" --fault stale-runtime-list");
    }
    if raft_store::fault::committed_as_log_id() {
        args.push_str(" --fault committed-as-log-id");
    }
    args
}

/// The `--features` a replay needs.
pub fn replay_features() -> &'static str {
    if cfg!(feature = "faults") {
        " --features faults"
    } else {
        ""
    }
}
