//! `[openshell.gateway.supervisor_pool]`: pool timing, retention and the
//! supervisors' credentials and identity (validated in gateway-plugin's
//! `config_pool.rs` into `PoolSettings`).

use std::path::PathBuf;

use proto::secret::Secret;
use serde::{Deserialize, Serialize};

/// `[openshell.gateway.supervisor_pool]`. `Debug` prints the shared token
/// as `<redacted>` ([`Secret`]).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
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
    pub supervisor_token: Option<Secret>,
    /// File of `member_id credential` lines (format:
    /// [`crate::member_credentials`]); re-read when it changes.
    pub member_credentials_file: Option<PathBuf>,
    /// `none` or `kubernetes` ([`validate_identity`]).
    pub member_identity: Option<String>,
    /// Audience of supervisor tokens (default `openshell-gateway`).
    pub member_identity_audience: Option<String>,
    /// `<namespace>:<name>`: only this ServiceAccount's tokens are members.
    pub member_identity_service_account: Option<String>,
}
