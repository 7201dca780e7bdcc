//! `[openshell.gateway.supervisor_pool]`: the section's keys and their
//! validation into [`PoolSettings`], what the hub runs on (pool timing,
//! retention, supervisor credentials and identity). `config.rs` keeps the
//! overlay of flags over the file and the other sections' assembly.
//!
//! ```toml
//! [openshell.gateway.supervisor_pool]
//! tick_interval_ms = 250
//! heartbeat_ttl_ms = 2000
//! recovery_deadline_ms = 60000
//! operation_deadline_ms = 600000
//! status_interval_ms = 500           # default: heartbeat_ttl_ms / 4 up to 1 s, at least a tick
//! retention_ticks = 14400    # --retention-ticks; one hour at 250 ms ticks
//! ```
//!
//! The supervisor identity keys of the same section: `member_identity`
//! (`--member-identity`), `member_identity_audience`
//! (`--member-identity-audience`) and `member_identity_service_account`
//! (`--member-identity-service-account`), validated into a
//! [`KubernetesIdentity`] ([`crate::member_identity`]).
//!
//! ```toml
//! [openshell.gateway.supervisor_pool]
//! member_identity = "kubernetes"                      # or "none" (default)
//! member_identity_audience = "openshell-gateway"      # default
//! member_identity_service_account = "openshell:rel-openshell-supervisor"
//! ```

use std::time::Duration;

pub use gateway_config::pool::SupervisorPoolSection;

use proto::secret::Secret;
use std::sync::Arc;

use crate::config_error::{in_range, ConfigError};
use crate::member_credentials::MemberCredentialsFile;
use crate::member_identity::{IdentitySettings, KubernetesIdentity};

/// Pool timing, from `[openshell.gateway.supervisor_pool]` (`Debug` prints
/// the shared token as `<redacted>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSettings {
    /// The leader appends a `Tick` this often (its monotonic clock).
    pub tick_interval: Duration,
    /// A member expires after this many ticks without a heartbeat.
    pub heartbeat_ttl_ticks: u64,
    /// A recovering sandbox fails after this many ticks without an owner.
    pub recovery_deadline_ticks: u64,
    /// A maintenance operation fails after this many ticks.
    pub operation_deadline_ticks: u64,
    /// Finished pool records are garbage-collected this many ticks after
    /// they finished (`retention_ticks`).
    pub retention_ticks: u64,
    /// Supervisors send `HostStatus` this often.
    pub status_interval: Duration,
    /// DEPRECATED shared credential: any supervisor holding it may join as
    /// any member id not listed in `member_credentials` (None: none).
    pub supervisor_token: Option<Secret>,
    /// The credential of each member id (`member_credentials_file`): a
    /// listed member must present its own; re-read on change.
    pub member_credentials: Option<MemberCredentialsFile>,
    /// `--member-identity kubernetes`: members not in the file prove their
    /// Pod name by TokenReview ([`crate::member_identity`]).
    pub member_identity: Option<Arc<KubernetesIdentity>>,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            tick_interval: Duration::from_millis(250),
            heartbeat_ttl_ticks: 8,
            recovery_deadline_ticks: 240,
            operation_deadline_ticks: 2400,
            retention_ticks: pool::DEFAULT_RETENTION_TICKS,
            status_interval: Duration::from_millis(500),
            supervisor_token: None,
            member_credentials: None,
            member_identity: None,
        }
    }
}

/// How often, in ticks, a gateway names each of its fresh members in its
/// heartbeat batches: every other tick (`hub::heartbeats::BeatWindow`). The
/// pool's TTL counts `BEAT_EVERY_TICKS - 1` ticks more than the configured
/// one ([`PoolSettings::pool_config`]), the most a member's last beat may
/// lag behind naming it at every tick.
pub const BEAT_EVERY_TICKS: u32 = 2;

impl PoolSettings {
    /// The pool config these settings ask for.
    ///
    /// The pool's TTL is the configured one plus the ticks a member's last
    /// beat may lag because it is named only every [`BEAT_EVERY_TICKS`]
    /// ticks: the pool then expires a member no sooner than when every
    /// tick named it.
    pub fn pool_config(&self) -> pool::Configure {
        let beat_lag = u64::from(BEAT_EVERY_TICKS - 1);
        pool::Configure {
            raft_term: 0,
            heartbeat_ttl_ticks: self.heartbeat_ttl_ticks.saturating_add(beat_lag),
            recovery_deadline_ticks: self.recovery_deadline_ticks,
            operation_deadline_ticks: self.operation_deadline_ticks,
            retention_ticks: self.retention_ticks,
        }
    }
}

/// The `HostStatus` interval when none is configured: a quarter of the
/// heartbeat TTL (a member survives three lost statuses) up to 1 s (a long
/// TTL is no reason to hear less often from a supervisor), and never
/// shorter than a tick (a batch is proposed once a tick; statuses more
/// frequent than that are only a cost). At the defaults (tick 250 ms, TTL
/// 2 s): 500 ms. Every status is a message each gateway decrypts, decodes and
/// wakes a task for, so with thousands of supervisors this interval sets
/// the quiet cost of a gateway (docs/benchmarks.md).
fn default_status_interval(tick_ms: u64, ttl_ms: u64) -> u64 {
    (ttl_ms / 4).min(1000).max(tick_ms)
}

pub(crate) fn validate_pool(section: SupervisorPoolSection) -> Result<PoolSettings, ConfigError> {
    let (supervisor_token, member_credentials) = credentials_from_section(&section)?;
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
        section
            .status_interval_ms
            .unwrap_or_else(|| default_status_interval(tick, ttl)),
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
    Ok(PoolSettings {
        tick_interval: Duration::from_millis(tick),
        heartbeat_ttl_ticks: ticks(ttl),
        recovery_deadline_ticks: ticks(recovery),
        operation_deadline_ticks: ticks(operation),
        retention_ticks: retention,
        status_interval: Duration::from_millis(status),
        supervisor_token,
        member_credentials,
        member_identity: validate_identity(&section)?,
    })
}

/// The supervisor credentials of `[openshell.gateway.supervisor_pool]`:
/// the member credentials file (read now: a bad file stops the start) and
/// the deprecated shared token, with a warning.
///
/// # Errors
/// [`ConfigError::Invalid`] naming the key, the file and the line.
fn credentials_from_section(
    section: &SupervisorPoolSection,
) -> Result<
    (
        Option<Secret>,
        Option<crate::member_credentials::MemberCredentialsFile>,
    ),
    ConfigError,
> {
    let member_credentials = section
        .member_credentials_file
        .as_deref()
        .map(|path| {
            crate::member_credentials::load(path).map_err(|problem| ConfigError::Invalid {
                key: "openshell.gateway.supervisor_pool.member_credentials_file",
                value: path.display().to_string(),
                problem,
            })
        })
        .transpose()?;
    let supervisor_token = section.supervisor_token.clone().filter(|t| !t.is_empty());
    if supervisor_token.is_some() {
        tracing::warn!(
            "supervisor_token (--supervisor-token) is DEPRECATED: any supervisor holding it can join as any \
             member{}; give each member its own credential in member_credentials_file \
             (--member-credentials-file)",
            if member_credentials.is_some() {
                " not listed in the member credentials file"
            } else {
                ""
            }
        );
    }
    Ok((supervisor_token, member_credentials))
}

/// The audience supervisor tokens must carry unless configured otherwise.
pub const DEFAULT_AUDIENCE: &str = "openshell-gateway";

const KEY_IDENTITY: &str = "openshell.gateway.supervisor_pool.member_identity";
const KEY_AUDIENCE: &str = "openshell.gateway.supervisor_pool.member_identity_audience";
const KEY_ACCOUNT: &str = "openshell.gateway.supervisor_pool.member_identity_service_account";

/// Validates the identity keys of `section` (`None`: identity off).
///
/// # Errors
/// [`ConfigError`] naming the key: an unknown kind, a missing or malformed
/// ServiceAccount, an empty audience, or either of those set without
/// `member_identity = "kubernetes"`.
pub fn validate_identity(
    section: &SupervisorPoolSection,
) -> Result<Option<Arc<KubernetesIdentity>>, ConfigError> {
    let kind = section.member_identity.as_deref().unwrap_or("none");
    match kind {
        "kubernetes" => {}
        "none" | "" => {
            for (key, set) in [
                (KEY_AUDIENCE, &section.member_identity_audience),
                (KEY_ACCOUNT, &section.member_identity_service_account),
            ] {
                if let Some(value) = set {
                    return Err(ConfigError::Invalid {
                        key,
                        value: value.clone(),
                        problem: "is used only with member_identity = \"kubernetes\" \
                                  (--member-identity kubernetes)"
                            .into(),
                    });
                }
            }
            return Ok(None);
        }
        other => {
            return Err(ConfigError::Invalid {
                key: KEY_IDENTITY,
                value: other.to_string(),
                problem: "must be \"none\" or \"kubernetes\"".into(),
            })
        }
    }
    let account = section
        .member_identity_service_account
        .as_deref()
        .ok_or(ConfigError::Missing {
            key: KEY_ACCOUNT,
            flag: "--member-identity-service-account <namespace>:<name>, required with --member-identity kubernetes",
        })?;
    let (namespace, service_account) =
        parse_account(account).map_err(|problem| ConfigError::Invalid {
            key: KEY_ACCOUNT,
            value: account.to_string(),
            problem,
        })?;
    let audience = section
        .member_identity_audience
        .clone()
        .unwrap_or_else(|| DEFAULT_AUDIENCE.to_string());
    if audience.is_empty() || audience.len() > 256 || audience.chars().any(char::is_whitespace) {
        return Err(ConfigError::Invalid {
            key: KEY_AUDIENCE,
            value: audience,
            problem: "must be 1 to 256 characters without spaces".into(),
        });
    }
    Ok(Some(Arc::new(KubernetesIdentity::new(IdentitySettings {
        audience,
        namespace,
        service_account,
    }))))
}

/// Parses `<namespace>:<name>` (a DNS label and a DNS subdomain).
fn parse_account(text: &str) -> Result<(String, String), String> {
    let Some((namespace, name)) = text.split_once(':') else {
        return Err("must be <namespace>:<name>, e.g. openshell:rel-openshell-supervisor".into());
    };
    let dns = |s: &str, max: usize, dots: bool| {
        !s.is_empty()
            && s.len() <= max
            && s.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.')
            })
            && !s.starts_with(['-', '.'])
            && !s.ends_with(['-', '.'])
    };
    if !dns(namespace, 63, false) {
        return Err(format!(
            "namespace {namespace:?} is not a Kubernetes namespace name"
        ));
    }
    if !dns(name, 253, true) {
        return Err(format!("{name:?} is not a Kubernetes service account name"));
    }
    Ok((namespace.to_string(), name.to_string()))
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

    /// Without `status_interval_ms`, supervisors are asked for a status
    /// every quarter of the heartbeat TTL up to 1 s, never more often than
    /// a tick;
    /// the defaults agree with `PoolSettings::default()`. A configured
    /// interval is kept.
    #[test]
    fn the_status_interval_defaults_to_a_quarter_of_the_ttl() {
        let with = |tick: Option<u64>, ttl: Option<u64>, status: Option<u64>| {
            validate_pool(SupervisorPoolSection {
                tick_interval_ms: tick,
                heartbeat_ttl_ms: ttl,
                status_interval_ms: status,
                ..SupervisorPoolSection::default()
            })
            .expect("valid")
            .status_interval
        };
        let ms = Duration::from_millis;
        assert_eq!(with(None, None, None), ms(500));
        assert_eq!(
            with(None, None, None),
            PoolSettings::default().status_interval
        );
        assert_eq!(with(Some(500), Some(4000), None), ms(1000));
        // At most 1 s, however long the TTL.
        assert_eq!(with(Some(500), Some(5000), None), ms(1000));
        assert_eq!(with(None, Some(60_000), None), ms(1000));
        // A quarter of the TTL is shorter than a tick: a tick.
        assert_eq!(with(Some(1000), Some(2000), None), ms(1000));
        assert_eq!(with(None, None, Some(250)), ms(250));
    }
}

#[cfg(test)]
mod identity_tests {
    use super::*;

    fn section(kind: Option<&str>, account: Option<&str>) -> SupervisorPoolSection {
        SupervisorPoolSection {
            member_identity: kind.map(String::from),
            member_identity_service_account: account.map(String::from),
            ..Default::default()
        }
    }

    fn error(s: &SupervisorPoolSection) -> String {
        validate_identity(s)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn kubernetes_needs_a_service_account_and_defaults_the_audience() {
        assert_eq!(validate_identity(&section(None, None)), Ok(None));
        let ok = validate_identity(&section(Some("kubernetes"), Some("ns:sup")))
            .ok()
            .flatten()
            .map(|i| i.settings().clone());
        assert_eq!(
            ok,
            Some(IdentitySettings {
                audience: DEFAULT_AUDIENCE.into(),
                namespace: "ns".into(),
                service_account: "sup".into(),
            })
        );
        let e = error(&section(Some("kubernetes"), None));
        assert!(
            e.contains("member_identity_service_account is required"),
            "{e}"
        );
        assert!(e.contains("--member-identity-service-account"), "{e}");
        let e = error(&section(Some("kubernetes"), Some("sup")));
        assert!(e.contains("<namespace>:<name>"), "{e}");
        let e = error(&section(Some("kubernetes"), Some("NS:sup")));
        assert!(e.contains("namespace \"NS\""), "{e}");
        let e = error(&section(Some("vault"), None));
        assert!(e.contains("member_identity = vault"), "{e}");
        let e = error(&section(None, Some("ns:sup")));
        assert!(e.contains("only with member_identity"), "{e}");
        let mut s = section(Some("kubernetes"), Some("ns:sup"));
        s.member_identity_audience = Some(String::new());
        assert!(error(&s).contains("member_identity_audience"));
    }
}
