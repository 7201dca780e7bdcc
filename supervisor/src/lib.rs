//! The supervisor pool's member process and the sandbox runtime.
//!
//! # Layout
//! - [`agent`]: `openshell-supervisor`, the pool member: attaches to any
//!   gateway, hosts sandbox sessions, serves readiness, drains itself and
//!   leaves the pool when stopped.
//! - [`runtime`]: `openshell-sandbox-runtime`, one process per sandbox: holds
//!   the workload alive and accepts exactly one supervisor at a time.
//! - [`trusted_keys`]: the trusted grant keys both of them verify gateways
//!   and grants against (a file re-read on change).

pub mod agent;
pub mod runtime;
pub mod trusted_keys;
