//! The OpenShell gateway's replicated-store services and the
//! `openshell-gateway` binary.
//!
//! A library first, so a gateway can embed it: [`server::run`] starts a raft
//! node on its data directory and serves every service on one port.
//!
//! # Layout
//! - [`config`]: the gateway configuration (TOML file, flags, environment) and
//!   its validation.
//! - [`state`]: [`state::GatewayState`], the state machine the raft log drives:
//!   the object store (and, next, the supervisor pool) in one log.
//! - [`cluster_admin_service`](mod@cluster_admin_service) serves `openshell.cluster.v1.ClusterAdmin`.
//! - [`object_store_service`](mod@object_store_service) serves `openshell.objects.v1.ObjectStore`.
//! - [`status`]: error-to-`Status` mapping with leader hints.
//! - [`server`]: wiring and the serve loop.

pub mod cluster_admin_service;
pub mod config;
pub mod object_store_service;
pub mod server;
pub mod state;
pub mod status;
