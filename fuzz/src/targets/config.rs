//! Configuration parsers: the gateway's TOML file
//! (`gateway_plugin::config::read_file`, then `GatewaySection::validate`)
//! and the supervisor's settings (`RawAgentConfig::validate`, the values of
//! its flags and `OPENSHELL_*` variables).
//!
//! Selector (first byte, modulo 2): 0 the rest is a gateway config file;
//! 1 the rest is supervisor settings, one per line in the order of
//! [`supervisor_settings`]. Settings that name files (signing key, TLS
//! files, credential and trusted keys files) are dropped before
//! validation: the harness must not read paths a fuzzer made up (one of
//! them could be `/dev/zero`); their own parsers have their own targets.

use gateway_plugin::config::{self, ValidateGateway};
use supervisor::agent::RawAgentConfig;

/// Runs one input.
pub fn run(data: &[u8]) {
    let (selector, bytes) = super::split(data);
    if selector % 2 == 0 {
        gateway(bytes);
    } else if let Ok(text) = std::str::from_utf8(bytes) {
        let _ = supervisor_settings(text).validate();
    }
}

fn gateway(bytes: &[u8]) {
    let path = super::scratch_file("gateway.toml", bytes);
    let section = config::read_file(&path);
    let _ = std::fs::remove_file(&path);
    let Ok(mut section) = section else {
        return;
    };
    section.signing_key_file = None;
    section.tls = None;
    let _ = section.validate();
}

/// Supervisor settings from lines: gateways (comma-separated), member id,
/// member uid, advertise ip, listen, http listen, capacity, credential,
/// drain timeout (ms), then flags (`i` insecure, `o` listed order, `n` no
/// drain on stop). An empty or missing line leaves the setting unset; a
/// number that does not parse is what clap would refuse before validation,
/// so it stays unset too.
pub fn supervisor_settings(text: &str) -> RawAgentConfig {
    let mut lines = text.split('\n');
    let mut next = || lines.next().filter(|l| !l.is_empty()).map(str::to_string);
    let gateways = next()
        .map(|g| g.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    let member_id = next();
    let member_uid = next();
    let advertise_ip = next();
    let listen = next();
    let http_listen = next();
    let capacity = next().and_then(|c| c.parse().ok());
    let credential = next();
    let drain_timeout_ms = next().and_then(|d| d.parse().ok());
    let flags = next().unwrap_or_default();
    RawAgentConfig {
        gateways,
        member_id,
        member_uid,
        advertise_ip,
        listen,
        http_listen,
        capacity,
        credential: credential.map(Into::into),
        drain_timeout_ms,
        insecure: flags.contains('i'),
        listed_order: flags.contains('o'),
        no_drain_on_stop: flags.contains('n'),
        ..RawAgentConfig::default()
    }
}
