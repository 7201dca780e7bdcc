//! `[openshell.gateway.supervisor_pool]`: the section's keys and their
//! validation into the hub's [`crate::hub::PoolSettings`] (pool timing,
//! retention, supervisor credentials). Moved out of `config.rs`, which
//! keeps the other sections and the overlay of flags over the file.
//!
//! ```toml
//! [openshell.gateway.supervisor_pool]
//! tick_interval_ms = 250
//! heartbeat_ttl_ms = 2000
//! recovery_deadline_ms = 60000
//! operation_deadline_ms = 600000
//! status_interval_ms = 250
//! retention_ticks = 14400    # --retention-ticks; one hour at 250 ms ticks
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::config::{in_range, ConfigError};

/// `[openshell.gateway.supervisor_pool]`.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupervisorPoolSection {
    /// The leader appends a `Tick` this often, ms (10..=10000, default 250).
    pub tick_interval_ms: Option<u64>,
    /// A member expires after this long without a heartbeat, ms (>= 2 ticks, <= 600000, default 2000).
    pub heartbeat_ttl_ms: Option<u64>,
    /// A sandbox without an active supervisor fails after this long, ms (>= 1 tick, <= 86400000, default 60000).
    pub recovery_deadline_ms: Option<u64>,
    /// A maintenance operation fails after this long, ms (>= 1 tick, <= 86400000, default 600000).
    pub operation_deadline_ms: Option<u64>,
    /// Supervisors send HostStatus this often, ms (10..=10000, default: tick_interval_ms).
    pub status_interval_ms: Option<u64>,
    /// Finished records (deleted or failed sandboxes, launch outcomes,
    /// departed members, finished operations) are garbage-collected this
    /// many ticks after they finished (1..=2^40, default 14400: one hour at
    /// the default 250 ms tick). A launch id is idempotent only this long.
    pub retention_ticks: Option<u64>,
    /// DEPRECATED: one credential shared by every supervisor, which lets
    /// any of them join as any member id; use `member_credentials_file`.
    /// When both are set, a member listed in the file must present its own
    /// credential and the shared one admits only unlisted member ids.
    pub supervisor_token: Option<String>,
    /// File of `member_id credential` lines (format:
    /// [`crate::member_credentials`]); re-read when it changes.
    pub member_credentials_file: Option<PathBuf>,
    /// `none` or `kubernetes` ([`crate::config_identity`]).
    pub member_identity: Option<String>,
    /// Audience of supervisor tokens (default `openshell-gateway`).
    pub member_identity_audience: Option<String>,
    /// `<namespace>:<name>`: only this ServiceAccount's tokens are members.
    pub member_identity_service_account: Option<String>,
}

impl std::fmt::Debug for SupervisorPoolSection {
    /// Prints every field but the secrets, which show as `<redacted>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisorPoolSection")
            .field("tick_interval_ms", &self.tick_interval_ms)
            .field("heartbeat_ttl_ms", &self.heartbeat_ttl_ms)
            .field("recovery_deadline_ms", &self.recovery_deadline_ms)
            .field("operation_deadline_ms", &self.operation_deadline_ms)
            .field("status_interval_ms", &self.status_interval_ms)
            .field("retention_ticks", &self.retention_ticks)
            .field(
                "supervisor_token",
                &proto::secret::redact_opt(&self.supervisor_token),
            )
            .field("member_credentials_file", &self.member_credentials_file)
            .field("member_identity", &self.member_identity)
            .field("member_identity_audience", &self.member_identity_audience)
            .field(
                "member_identity_service_account",
                &self.member_identity_service_account,
            )
            .finish()
    }
}

pub(crate) fn validate_pool(
    section: SupervisorPoolSection,
) -> Result<crate::hub::PoolSettings, ConfigError> {
    let (supervisor_token, member_credentials) = crate::member_credentials::from_section(&section)?;
    let tick = in_range(
        "openshell.gateway.supervisor_pool.tick_interval_ms",
        section.tick_interval_ms.unwrap_or(250),
        10,
        10_000,
    )?;
    let ticks = |ms: u64| ms.div_ceil(tick);
    let ttl = in_range(
        "openshell.gateway.supervisor_pool.heartbeat_ttl_ms",
        section.heartbeat_ttl_ms.unwrap_or(2000),
        2 * tick,
        600_000,
    )?;
    let recovery = in_range(
        "openshell.gateway.supervisor_pool.recovery_deadline_ms",
        section.recovery_deadline_ms.unwrap_or(60_000),
        tick,
        86_400_000,
    )?;
    let operation = in_range(
        "openshell.gateway.supervisor_pool.operation_deadline_ms",
        section.operation_deadline_ms.unwrap_or(600_000),
        tick,
        86_400_000,
    )?;
    let status = in_range(
        "openshell.gateway.supervisor_pool.status_interval_ms",
        section.status_interval_ms.unwrap_or(tick),
        10,
        10_000,
    )?;
    let retention = in_range(
        "openshell.gateway.supervisor_pool.retention_ticks",
        section
            .retention_ticks
            .unwrap_or(pool::DEFAULT_RETENTION_TICKS),
        1,
        pool::MAX_CONFIG_TICKS,
    )?;
    if status * 2 > ttl {
        return Err(ConfigError::Invalid {
            key: "openshell.gateway.supervisor_pool.status_interval_ms",
            value: status.to_string(),
            problem: format!(
                "must be at most half of heartbeat_ttl_ms ({ttl}), or live supervisors would expire between two statuses"
            ),
        });
    }
    Ok(crate::hub::PoolSettings {
        tick_interval: Duration::from_millis(tick),
        heartbeat_ttl_ticks: ticks(ttl),
        recovery_deadline_ticks: ticks(recovery),
        operation_deadline_ticks: ticks(operation),
        retention_ticks: retention,
        status_interval: Duration::from_millis(status),
        supervisor_token,
        member_credentials,
        member_identity: crate::config_identity::validate(&section)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `retention_ticks` defaults to the pool's default, and a value out of
    /// 1..=2^40 is refused naming the key.
    #[test]
    fn retention_ticks_defaults_and_is_range_checked() {
        let settings = validate_pool(SupervisorPoolSection::default()).expect("defaults");
        assert_eq!(settings.retention_ticks, pool::DEFAULT_RETENTION_TICKS);
        for bad in [0, pool::MAX_CONFIG_TICKS + 1] {
            let e = validate_pool(SupervisorPoolSection {
                retention_ticks: Some(bad),
                ..SupervisorPoolSection::default()
            })
            .expect_err("out of range")
            .to_string();
            assert!(e.contains("supervisor_pool.retention_ticks"), "{e}");
        }
        let settings = validate_pool(SupervisorPoolSection {
            retention_ticks: Some(20),
            ..SupervisorPoolSection::default()
        })
        .expect("in range");
        assert_eq!(settings.pool_config().retention_ticks, 20);
    }
}
