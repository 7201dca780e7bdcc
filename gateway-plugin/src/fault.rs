//! Jepsen-only fault injection, for proving that the Jepsen checkers catch
//! the bugs they exist for (jepsen/tests/t50, t55, t60).
//!
//! The faults are compiled in only by the `fault-*` features (never on by
//! default), and even then stay off until the gateway turns them on at
//! start-up from `OPENSHELL_FAULT` (a comma-separated list of
//! `stale-reads`, `skip-i4`, `shared-resource-version`,
//! `stale-runtime-list`), so one fault build
//! serves every proof. A build without the features ignores the variable.

/// The environment variable naming the faults to turn on.
pub const FAULT_ENV: &str = "OPENSHELL_FAULT";

#[cfg(feature = "fault-stale-reads")]
static STALE_READS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// True while the stale-reads fault is on: linearizable Get/List skip
/// read-index and serve this node's local state.
#[cfg(feature = "fault-stale-reads")]
pub fn stale_reads() -> bool {
    STALE_READS.load(std::sync::atomic::Ordering::SeqCst)
}

/// Always false: this build has no fault injection.
#[cfg(not(feature = "fault-stale-reads"))]
pub const fn stale_reads() -> bool {
    false
}

#[cfg(feature = "fault-stale-runtime-list")]
static STALE_RUNTIME_LIST: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// True while the stale-runtime-list fault is on: every gateway that does
/// not lead runs a deposed leader's launcher passes as they were before
/// issue 27 (`launcher/fault.rs`), so that race happens on most launches.
#[cfg(feature = "fault-stale-runtime-list")]
pub fn stale_runtime_list() -> bool {
    STALE_RUNTIME_LIST.load(std::sync::atomic::Ordering::SeqCst)
}

/// Turns the stale-runtime-list fault on or off (the simulation's switch;
/// a gateway process turns it on from [`FAULT_ENV`]).
#[cfg(feature = "fault-stale-runtime-list")]
pub fn set_stale_runtime_list(on: bool) {
    STALE_RUNTIME_LIST.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// Always false: this build has no fault injection.
#[cfg(not(feature = "fault-stale-runtime-list"))]
pub const fn stale_runtime_list() -> bool {
    false
}

/// A name in `OPENSHELL_FAULT` this build cannot turn on.
#[derive(Debug, thiserror::Error)]
#[error("{FAULT_ENV}: fault {0:?} is unknown or not compiled into this build (features fault-stale-reads, fault-skip-i4, fault-shared-resource-version, fault-stale-runtime-list)")]
pub struct UnknownFault(pub String);

/// Turns on the faults `OPENSHELL_FAULT` names; returns their names. A build
/// without any fault feature turns nothing on whatever the variable says.
pub fn enable_from_env() -> Result<Vec<String>, UnknownFault> {
    let any = cfg!(any(
        feature = "fault-stale-reads",
        feature = "fault-skip-i4",
        feature = "fault-shared-resource-version",
        feature = "fault-stale-runtime-list"
    ));
    let Some(list) = std::env::var_os(FAULT_ENV).filter(|_| any) else {
        return Ok(Vec::new());
    };
    let list = list.to_string_lossy().into_owned();
    let names: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    for name in &names {
        enable(name)?;
    }
    Ok(names)
}

fn enable(name: &str) -> Result<(), UnknownFault> {
    match name {
        #[cfg(feature = "fault-stale-reads")]
        "stale-reads" => {
            STALE_READS.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
        #[cfg(feature = "fault-skip-i4")]
        "skip-i4" => {
            pool::fault::set_skip_i4(true);
            Ok(())
        }
        #[cfg(feature = "fault-shared-resource-version")]
        "shared-resource-version" => {
            raft_store::fault::set_shared_resource_version(true);
            Ok(())
        }
        #[cfg(feature = "fault-stale-runtime-list")]
        "stale-runtime-list" => {
            STALE_RUNTIME_LIST.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
        other => Err(UnknownFault(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real build (no fault feature) turns nothing on, whatever the
    /// environment says; with the features, an unknown name is refused.
    #[test]
    fn only_fault_builds_turn_faults_on() {
        std::env::set_var(FAULT_ENV, "stale-reads,no-such-fault");
        let result = enable_from_env();
        std::env::remove_var(FAULT_ENV);
        if cfg!(feature = "fault-stale-reads") {
            let err = result.expect_err("an unknown fault must be refused");
            assert!(err.to_string().contains("no-such-fault"), "{err}");
            assert!(stale_reads());
        } else {
            assert_eq!(
                result.expect("no features: nothing to refuse"),
                Vec::<String>::new()
            );
            assert!(!stale_reads());
            assert!(!pool::fault::skip_i4());
            assert!(!raft_store::fault::shared_resource_version());
            assert!(!stale_runtime_list());
        }
    }
}
