//! `gateway-config`: the gateway's configuration as it is read and
//! written, the leaf every launcher and the gateway share. A gateway reads
//! it (`openshell-gateway --config`), validates it (`gateway-plugin`'s
//! `config` module: the `Validate*` traits) and runs with the result; a
//! launcher (`local-cluster`: `openshell-pool dev`, testkit, the Jepsen
//! harness) writes it with [`to_toml`]. No validation lives here, so no
//! runtime crate is pulled in.
//!
//! # Layout
//! - [`gateway`]: `[openshell.gateway]` ([`GatewaySection`],
//!   [`RaftSection`]), [`read_file`], [`to_toml`], the flags-over-file
//!   overlay.
//! - [`tls`]: the sections `[openshell.gateway.auth]` and
//!   `[openshell.gateway.tls]`.
//! - [`pool`]: the section `[openshell.gateway.supervisor_pool]`.
//! - [`driver`]: the section `[openshell.gateway.sandbox_driver]`.
//! - [`autopilot`]: the section `[openshell.gateway.autopilot]`.
//! - [`error`]: [`ConfigError`], naming the key at fault.

pub mod autopilot;
pub mod driver;
pub mod error;
pub mod gateway;
pub mod pool;
pub mod tls;

pub use autopilot::AutopilotSection;
pub use driver::SandboxDriverSection;
pub use error::ConfigError;
pub use gateway::{read_file, to_toml, GatewaySection, RaftSection};
pub use pool::SupervisorPoolSection;
pub use tls::{AuthSection, TlsSection};
