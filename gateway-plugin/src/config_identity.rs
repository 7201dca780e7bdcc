//! The supervisor identity keys of `[openshell.gateway.supervisor_pool]`:
//! `member_identity` (`--member-identity`), `member_identity_audience`
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

use std::sync::Arc;

use crate::config::{ConfigError, SupervisorPoolSection};
use crate::member_identity::{IdentitySettings, KubernetesIdentity};

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
pub fn validate(
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

    fn section(kind: Option<&str>, account: Option<&str>) -> SupervisorPoolSection {
        SupervisorPoolSection {
            member_identity: kind.map(String::from),
            member_identity_service_account: account.map(String::from),
            ..Default::default()
        }
    }

    fn error(s: &SupervisorPoolSection) -> String {
        validate(s).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn kubernetes_needs_a_service_account_and_defaults_the_audience() {
        assert_eq!(validate(&section(None, None)), Ok(None));
        let ok = validate(&section(Some("kubernetes"), Some("ns:sup")))
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
