//! The supervisor pool's member process and the sandbox runtime.
//!
//! # Layout
//! - [`agent`]: `openshell-supervisor`, the pool member: attaches to any
//!   gateway, hosts sandbox sessions, serves readiness.
//! - [`runtime`]: `openshell-sandbox-runtime`, one process per sandbox: holds
//!   the workload alive and accepts exactly one supervisor at a time.

pub mod agent;
pub mod runtime;
