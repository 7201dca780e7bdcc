//! `local-cluster`: what a local cluster of gateways and supervisors is
//! made of, in one library, so that `openshell-pool dev` (cli/src/dev),
//! the end-to-end tests (testkit) and the Jepsen harness describe it once
//! and keep only their own policy (which names, which addresses, what to
//! reuse).
//!
//! # Layout
//! - [`secrets`]: the secrets of a cluster (a throwaway CA, gateway
//!   certificates, the grant signing key and the trusted keys file derived
//!   from it, the admin token, a credential per member and the gateways'
//!   member credentials file), generated under one directory or loaded
//!   from it, and the one spelling of the secret-file flags a launcher
//!   gives a gateway or a supervisor.
//!
//! Throwaway material for a laptop, a test or a Jepsen run: real
//! deployments bring their own CA and keys (docs/security.md).

pub mod gateway;
pub mod secrets;
pub mod supervisor;
