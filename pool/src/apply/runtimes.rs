//! Appliers of the runtime commands the leader's launcher proposes
//! (docs/design/0003): `RecordRuntime` (the endpoint of a generation's
//! runtime, recorded once and never replaced) and `FailLaunch` (a launch
//! that failed or a runtime that was lost ends the generation as `Failed`,
//! through the same path as `FailRecovery`).

use std::net::SocketAddr;

// The parent's imports (commands, state) and shared checks.
use super::*;

/// Longest runtime name (a DNS label).
pub const MAX_RUNTIME_NAME_LEN: usize = 63;
/// Longest runtime address (`host:port`), in bytes.
pub const MAX_RUNTIME_ADDRESS_LEN: usize = 256;
/// Largest runtime CA certificate PEM, in bytes.
pub const MAX_RUNTIME_CA_PEM_LEN: usize = 16 * 1024;
/// Longest driver scope, in bytes.
pub const MAX_DRIVER_SCOPE_LEN: usize = 128;
/// Longest `FailLaunch` reason, in bytes.
pub const MAX_FAILURE_REASON_LEN: usize = 1024;
/// What a runtime CA PEM starts with.
const PEM_CERTIFICATE: &str = "-----BEGIN CERTIFICATE-----";

fn invalid(field: &str, detail: impl Into<String>) -> Reason {
    Reason::InvalidRuntime {
        field: field.to_string(),
        detail: detail.into(),
    }
}

/// Checks the endpoint fields and the driver scope; the error names the
/// first bad one.
fn check_endpoint(c: &RecordRuntime) -> R<()> {
    let name_ok = (1..=MAX_RUNTIME_NAME_LEN).contains(&c.name.len())
        && c.name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !name_ok {
        return Err(invalid(
            "name",
            format!("must be 1 to {MAX_RUNTIME_NAME_LEN} of a-z0-9-"),
        ));
    }
    if c.address.len() > MAX_RUNTIME_ADDRESS_LEN {
        return Err(invalid(
            "address",
            format!("longer than {MAX_RUNTIME_ADDRESS_LEN} bytes"),
        ));
    }
    if c.address.parse::<SocketAddr>().is_err() {
        return Err(invalid("address", "must be host:port (a socket address)"));
    }
    if c.ca_pem.is_empty() || c.ca_pem.len() > MAX_RUNTIME_CA_PEM_LEN {
        return Err(invalid(
            "ca_pem",
            format!("must be 1 to {MAX_RUNTIME_CA_PEM_LEN} bytes"),
        ));
    }
    if !c.ca_pem.starts_with(PEM_CERTIFICATE) {
        return Err(invalid(
            "ca_pem",
            format!("must start with {PEM_CERTIFICATE}"),
        ));
    }
    if c.driver_scope.len() > MAX_DRIVER_SCOPE_LEN
        || !c.driver_scope.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(invalid(
            "driver_scope",
            format!("must be at most {MAX_DRIVER_SCOPE_LEN} bytes of printable ASCII"),
        ));
    }
    Ok(())
}

impl PoolState {
    /// Checks the sandbox exists at `generation` and holds a slot
    /// (admitting, assigned, recovering, stopping); returns it.
    fn live(&self, id: &str, generation: u64) -> R<&Sandbox> {
        let s = self
            .sandboxes
            .get(id)
            .ok_or_else(|| Reason::UnknownSandbox(id.to_string()))?;
        if s.generation != generation {
            return Err(Reason::StaleGeneration {
                given: generation,
                current: s.generation,
            });
        }
        match s.phase {
            Phase::Deleted => Err(Reason::Deleted),
            Phase::Failed => Err(Reason::Failed),
            Phase::Admitting | Phase::Assigned | Phase::Recovering | Phase::Stopping => Ok(s),
        }
    }

    /// Records the endpoint of a live generation's runtime, with the log
    /// index recording it (`index`) and the scope of the driver that
    /// listed it. The record belongs to that generation (a new generation
    /// starts without one) and is never replaced: the same endpoint again
    /// is an idempotent repeat (a new leader re-proposing; its scope is not
    /// compared, the first one stays), a different one is rejected
    /// (`RuntimeAlreadyRecorded`). Changes no ownership, term or charge (I1,
    /// I2, I5 untouched); a deleted or failed generation takes none (I8).
    pub(super) fn apply_record_runtime(&mut self, index: u64, c: &RecordRuntime) -> R<Effect> {
        let s = self.live(&c.sandbox, c.generation)?;
        check_endpoint(c)?;
        let runtime = Runtime {
            name: c.name.clone(),
            address: c.address.clone(),
            ca_pem: c.ca_pem.clone(),
            recorded_index: index,
            driver_scope: c.driver_scope.clone(),
        };
        let same = |r: &Runtime| {
            r.name == runtime.name && r.address == runtime.address && r.ca_pem == runtime.ca_pem
        };
        match &s.runtime {
            Some(recorded) if same(recorded) => return Ok(Effect::RuntimeAlreadyRecorded),
            Some(recorded) => return Err(Reason::RuntimeAlreadyRecorded(recorded.name.clone())),
            None => {}
        }
        let Some(mut s) = self.sandboxes.get_mut(&c.sandbox) else {
            unreachable!("sandbox vanished")
        };
        s.runtime = Some(runtime);
        Ok(Effect::RuntimeRecorded)
    }

    /// Fails a live generation whose runtime could not be launched or was
    /// lost, with the given reason (`LaunchFailed: ...` / `RuntimeLost:
    /// ...`). The effect is `FailRecovery`'s (one code path,
    /// `fail_generation`): phase `Failed`, exactly its slot and launch
    /// material released (I5), recovery cleared; never revived (I8).
    pub(super) fn apply_fail_launch(&mut self, c: &FailLaunch) -> R<Effect> {
        self.live(&c.sandbox, c.generation)?;
        let known = [LAUNCH_FAILED, RUNTIME_LOST].iter().any(|prefix| {
            c.reason
                .strip_prefix(prefix)
                .is_some_and(|r| r.starts_with(": "))
        });
        if !known {
            return Err(Reason::InvalidFailureReason(format!(
                "must start with \"{LAUNCH_FAILED}: \" or \"{RUNTIME_LOST}: \""
            )));
        }
        if c.reason.len() > MAX_FAILURE_REASON_LEN {
            return Err(Reason::InvalidFailureReason(format!(
                "longer than {MAX_FAILURE_REASON_LEN} bytes"
            )));
        }
        self.fail_generation(&c.sandbox, c.reason.clone());
        Ok(Effect::LaunchFailed {
            reason: c.reason.clone(),
        })
    }
}
