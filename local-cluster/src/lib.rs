//! `local-cluster`: what a local cluster of gateways and supervisors is
//! made of, in one library, so that `openshell-pool dev` (cli/src/dev),
//! the end-to-end tests (testkit), the Jepsen harness and the benchmarks
//! describe it once and keep only their own policy (which names, which
//! addresses and timing, what to reuse, which namespace a process runs in).
//!
//! # Layout
//! - [`secrets`]: the secrets of a cluster (a throwaway CA, gateway
//!   certificates, the grant signing key and the trusted keys file derived
//!   from it, the admin token, a credential per member and the gateways'
//!   member credentials file), generated under one directory or loaded
//!   from it, and what a gateway or a supervisor is given of them.
//! - [`gateway`]: a gateway as its own configuration
//!   (`[openshell.gateway]`, the gateway's config types), written as the
//!   `--config` file it starts with.
//! - [`supervisor`]: a supervisor's command line, spelled once.
//! - [`process`]: one started program (spawn, signal, reap, `kill -9`), the
//!   network-namespace hook and log files.
//!
//! Throwaway material for a laptop, a test or a Jepsen run: real
//! deployments bring their own CA and keys (docs/security.md).

pub mod gateway;
pub mod process;
pub mod secrets;
pub mod supervisor;
