//! `[openshell.gateway.autopilot]`: the voter autopilot's replica source and
//! peer address template (validated in gateway-plugin's
//! `config_statefulset.rs`).

use serde::{Deserialize, Serialize};

/// `[openshell.gateway.autopilot]` as read (file and flags).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AutopilotSection {
    /// `file:<path>` or `statefulset:<name>`.
    pub replicas: Option<String>,
    /// The peer address template, with `{ordinal}` and/or `{node_id}`.
    pub peer_address: Option<String>,
}

impl AutopilotSection {
    /// Overlays `other`'s set values (flags over file).
    pub fn overlay(mut self, other: AutopilotSection) -> AutopilotSection {
        if other.replicas.is_some() {
            self.replicas = other.replicas;
        }
        if other.peer_address.is_some() {
            self.peer_address = other.peer_address;
        }
        self
    }
}
