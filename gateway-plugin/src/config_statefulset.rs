//! What a gateway run from a Kubernetes StatefulSet configures: its node id
//! from its pod name (`--node-id-from-pod-name`), and the voter autopilot
//! (`[openshell.gateway.autopilot]`, run by [`crate::autopilot`]).
//!
//! ```toml
//! [openshell.gateway.autopilot]
//! # How many voters there should be: "file:<path>" (one integer, re-read
//! # every pass) or "statefulset:<name>" (its spec.replicas).
//! replicas = "statefulset:rel-openshell-gateway"
//! # The peer address of node N: {ordinal} is N-1, {node_id} is N.
//! peer_address = "rel-openshell-gateway-{ordinal}.rel-openshell-gateway-peer.ns.svc.cluster.local:7001"
//! ```

use std::path::PathBuf;

pub use gateway_config::autopilot::AutopilotSection;

use crate::config_error::ConfigError;

/// The key of `--autopilot-replicas`.
pub const REPLICAS_KEY: &str = "openshell.gateway.autopilot.replicas";
/// The key of `--autopilot-peer-address`.
pub const PEER_ADDRESS_KEY: &str = "openshell.gateway.autopilot.peer_address";

/// Validation of `[openshell.gateway.autopilot]` (the section is
/// `gateway_config`'s).
pub trait ValidateAutopilot {
    /// See the implementation.
    ///
    /// # Errors
    /// [`ConfigError`] naming the key at fault.
    fn validate(self) -> Result<Option<AutopilotConfig>, ConfigError>;
}

impl ValidateAutopilot for AutopilotSection {
    /// Validates the section: both keys or neither (`None`: no autopilot).
    /// A `statefulset:<name>` source is read in the gateway's own namespace
    /// (the in-cluster one: the gateways' StatefulSet is where the gateway
    /// Pods are, whatever namespace the sandbox driver launches runtimes in);
    /// `statefulset:<namespace>/<name>` names another.
    ///
    /// # Errors
    /// [`ConfigError`] naming the key at fault.
    fn validate(self) -> Result<Option<AutopilotConfig>, ConfigError> {
        let (replicas, template) = match (self.replicas, self.peer_address) {
            (None, None) => return Ok(None),
            (Some(replicas), None) => {
                return Err(ConfigError::Invalid {
                    key: REPLICAS_KEY,
                    value: replicas,
                    problem: format!(
                        "needs {PEER_ADDRESS_KEY} (--autopilot-peer-address) too: the autopilot takes both or neither"
                    ),
                })
            }
            (None, Some(template)) => {
                return Err(ConfigError::Invalid {
                    key: PEER_ADDRESS_KEY,
                    value: template,
                    problem: format!(
                        "needs {REPLICAS_KEY} (--autopilot-replicas) too: the autopilot takes both or neither"
                    ),
                })
            }
            (Some(r), Some(t)) => (r, t),
        };
        let source = parse_source(&replicas)?;
        check_template(&template)?;
        Ok(Some(AutopilotConfig {
            replicas: source,
            peer_address: template,
        }))
    }
}

/// Where the autopilot reads how many voters there should be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaSource {
    /// A file holding one integer, re-read every pass.
    File(PathBuf),
    /// `spec.replicas` of a StatefulSet.
    StatefulSet {
        /// The StatefulSet's name.
        name: String,
        /// Its namespace (None: the gateway's own, in-cluster).
        namespace: Option<String>,
    },
}

impl std::fmt::Display for ReplicaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplicaSource::File(path) => write!(f, "file:{}", path.display()),
            ReplicaSource::StatefulSet {
                name,
                namespace: None,
            } => write!(f, "statefulset:{name}"),
            ReplicaSource::StatefulSet {
                name,
                namespace: Some(ns),
            } => write!(f, "statefulset:{ns}/{name}"),
        }
    }
}

/// The validated autopilot settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutopilotConfig {
    /// Desired voters are node ids `1..=replicas`.
    pub replicas: ReplicaSource,
    /// The peer address template.
    pub peer_address: String,
}

impl AutopilotConfig {
    /// The peer address of node `node_id` (>= 1).
    pub fn peer_address_of(&self, node_id: u64) -> String {
        self.peer_address
            .replace("{ordinal}", &node_id.saturating_sub(1).to_string())
            .replace("{node_id}", &node_id.to_string())
    }
}

fn parse_source(text: &str) -> Result<ReplicaSource, ConfigError> {
    let invalid = |problem: &str| ConfigError::Invalid {
        key: REPLICAS_KEY,
        value: text.to_string(),
        problem: problem.to_string(),
    };
    if let Some(path) = text.strip_prefix("file:") {
        if path.is_empty() {
            return Err(invalid(
                "file: needs a path, e.g. file:/etc/openshell/replicas",
            ));
        }
        return Ok(ReplicaSource::File(PathBuf::from(path)));
    }
    if let Some(rest) = text.strip_prefix("statefulset:") {
        let (namespace, name) = match rest.split_once('/') {
            Some((ns, name)) => (Some(ns), name),
            None => (None, rest),
        };
        if !is_dns_subdomain(name) || namespace.is_some_and(|ns| !is_dns_subdomain(ns)) {
            return Err(invalid(
                "statefulset: needs [<namespace>/]<name> of the gateways' StatefulSet (DNS names: [a-z0-9.-], at most 253)",
            ));
        }
        return Ok(ReplicaSource::StatefulSet {
            name: name.to_string(),
            namespace: namespace.map(str::to_string),
        });
    }
    Err(invalid(
        "must be file:<path> or statefulset:[<namespace>/]<name>",
    ))
}

/// The template must name the node (`{ordinal}` or `{node_id}`), and give
/// host:port once filled in.
fn check_template(template: &str) -> Result<(), ConfigError> {
    let invalid = |problem: &str| ConfigError::Invalid {
        key: PEER_ADDRESS_KEY,
        value: template.to_string(),
        problem: problem.to_string(),
    };
    if !template.contains("{ordinal}") && !template.contains("{node_id}") {
        return Err(invalid(
            "must contain {ordinal} (node id - 1) or {node_id}, e.g. gw-{ordinal}.gw-peer:7001",
        ));
    }
    let filled = template.replace("{ordinal}", "0").replace("{node_id}", "1");
    let port_ok = filled
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !port_ok || filled.contains('{') || filled.contains('}') {
        return Err(invalid(
            "must be host:port once {ordinal}/{node_id} are filled in (no other placeholders)",
        ));
    }
    Ok(())
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The node id of StatefulSet pod `pod_name` (`<anything>-<ordinal>`): its
/// ordinal + 1.
///
/// # Errors
/// One line naming the flag, for a name without a trailing `-<digits>`.
pub fn node_id_from_pod_name(pod_name: &str) -> Result<u64, ConfigError> {
    let invalid = |problem: &str| ConfigError::Invalid {
        key: "--node-id-from-pod-name (OPENSHELL_POD_NAME)",
        value: pod_name.to_string(),
        problem: problem.to_string(),
    };
    let ordinal = pod_name
        .rsplit_once('-')
        .map(|(_, tail)| tail)
        .filter(|tail| !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            invalid("not a StatefulSet pod name <name>-<ordinal> (e.g. rel-openshell-gateway-0)")
        })?;
    let ordinal: u64 = ordinal
        .parse()
        .map_err(|_| invalid("the ordinal is too large"))?;
    ordinal
        .checked_add(1)
        .ok_or_else(|| invalid("the ordinal is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_name_gives_ordinal_plus_one() {
        assert_eq!(node_id_from_pod_name("rel-openshell-gateway-0"), Ok(1));
        assert_eq!(node_id_from_pod_name("gw-12"), Ok(13));
        for bad in [
            "gateway",
            "gw-",
            "gw-1a",
            "-",
            "",
            "gw-99999999999999999999",
        ] {
            let e = node_id_from_pod_name(bad).unwrap_err().to_string();
            assert!(e.contains("--node-id-from-pod-name"), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn autopilot_needs_both_keys_and_a_valid_template() {
        let section = |r: Option<&str>, t: Option<&str>| AutopilotSection {
            replicas: r.map(str::to_string),
            peer_address: t.map(str::to_string),
        };
        assert_eq!(section(None, None).validate(), Ok(None));
        assert!(section(Some("file:/x"), None).validate().is_err());
        assert!(section(None, Some("a-{ordinal}:1")).validate().is_err());
        assert!(section(Some("cm:x"), Some("a-{ordinal}:1"))
            .validate()
            .is_err());
        assert!(section(Some("file:/x"), Some("a:1")).validate().is_err());
        assert!(section(Some("file:/x"), Some("a-{ordinal}"))
            .validate()
            .is_err());
        assert!(section(Some("file:/x"), Some("a-{pod}-{ordinal}:1"))
            .validate()
            .is_err());
        let config = section(
            Some("statefulset:rel-gw"),
            Some("rel-gw-{ordinal}.peer.ns.svc:7001"),
        )
        .validate()
        .unwrap()
        .unwrap();
        assert_eq!(config.peer_address_of(3), "rel-gw-2.peer.ns.svc:7001");
        assert_eq!(
            config.replicas,
            ReplicaSource::StatefulSet {
                name: "rel-gw".into(),
                namespace: None
            }
        );
        let other_ns = section(Some("statefulset:gw-ns/rel-gw"), Some("x-{ordinal}:7001"))
            .validate()
            .unwrap()
            .unwrap();
        assert_eq!(
            other_ns.replicas,
            ReplicaSource::StatefulSet {
                name: "rel-gw".into(),
                namespace: Some("gw-ns".into())
            }
        );
        assert_eq!(other_ns.replicas.to_string(), "statefulset:gw-ns/rel-gw");
        let by_id = section(Some("file:/r"), Some("127.0.1.{node_id}:7000"))
            .validate()
            .unwrap()
            .unwrap();
        assert_eq!(by_id.peer_address_of(4), "127.0.1.4:7000");
    }
}
