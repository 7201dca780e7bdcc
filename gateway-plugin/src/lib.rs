//! The OpenShell gateway's replicated-store services and the
//! `openshell-gateway` binary.
//!
//! A library first, so a gateway can embed it: [`server::run`] starts a raft
//! node on its data directory and serves every service on one port.
//!
//! # Layout
//! - [`config`]: the gateway configuration (TOML file, flags, environment) and
//!   its validation, one module per section below it ([`config_pool`]: the
//!   `supervisor_pool` section into [`config_pool::PoolSettings`], timing,
//!   retention, supervisor credentials and identity; [`config_tls`]: ports,
//!   TLS, auth and secure mode; [`config_driver`], [`config_statefulset`]),
//!   all reporting [`config_error::ConfigError`]; none of them imports
//!   `config`; [`config_check`] is `--check-config` (validate, start
//!   nothing).
//! - [`state`]: [`state::GatewayState`], the state machine the raft log drives:
//!   the object store and the supervisor pool in one log, plus the journal of
//!   sandboxes each pool command touched (`pool::visibility::ChangeLog`);
//!   [`requests`]: its request-id table, which answers a retried write
//!   with its first outcome instead of applying it twice.
//! - [`hub`]: the supervision hub, one module per concern:
//!   [`hub::streams`] (attached supervisor streams: attach, detach,
//!   is_current, touch), [`hub::heartbeats`] (the per-tick heartbeat batch),
//!   [`hub::snapshots`] (assignment snapshot pushing; what each incarnation
//!   may see is decided by the pure `pool::visibility`), [`hub::leader`]
//!   (the leader-only coordinator loop), [`hub::exec`] (exec over an
//!   attached supervisor's own stream).
//! - [`convert`]: conversions between pool / raft-store types and proto
//!   messages, one module per direction: [`convert::to_proto`] and
//!   [`convert::from_proto`]; and [`convert::page`], the keyset pages of
//!   the pool's operator reads.
//! - Services, thin adapters whose docs say who may call them:
//!   [`cluster_admin_service`](mod@cluster_admin_service) serves
//!   `openshell.cluster.v1.ClusterAdmin`,
//!   [`object_store_service`](mod@object_store_service) serves
//!   `openshell.objects.v1.ObjectStore`,
//!   [`supervisor_host_service`](mod@supervisor_host_service) serves
//!   `openshell.supervisor_host.v1.SupervisorHost`,
//!   [`pool_admin_service`](mod@pool_admin_service) serves
//!   `openshell.pool_admin.v1.PoolAdmin`,
//!   [`peer_relay_service`](mod@peer_relay_service) serves
//!   `openshell.gateway.v1.PeerRelay` (gateway to gateway: an exec relayed
//!   to the gateway holding the owner's supervisor stream).
//! - [`auth`]: bearer tokens, the `platform_admin` role, and the interceptor
//!   that refuses a call without a valid token before its body is read.
//! - [`log_limit`]: the rate limit of log lines a caller can cause at will
//!   (refused tokens and supervisor hellos).
//! - [`audit`]: the audit record (target `audit`) of every administrative
//!   call: action, outcome, caller (role, token fingerprint, peer), objects.
//! - [`member_credentials`]: the member credentials file (one credential
//!   per supervisor member id), re-read on change; [`member_identity`]:
//!   supervisor Pods proving their Pod name by Kubernetes TokenReview
//!   (configured in [`config_pool`]).
//! - [`fault`]: Jepsen-only fault injection, compiled in only by the
//!   `fault-*` features and chosen at start-up by `OPENSHELL_FAULT`.
//! - [`metrics`], [`http`]: Prometheus metrics, `/healthz`, `/readyz`,
//!   `/metrics`; [`rpc_metrics`]: the tower layer timing every gRPC call
//!   by service, method and code; [`pool_tally`]: what applied pool
//!   commands did (takeovers, drains, stale reports), counted beside the
//!   state machine, never inside the pure pool crate.
//! - [`health`]: liveness (raft running) and readiness (caught up with the
//!   leader, with hysteresis), evaluated continuously for the probes.
//! - [`launcher`]: the leader's sandbox launcher (one runtime per sandbox
//!   generation through a `sandbox_driver::SandboxDriver`; its decisions are
//!   the pure [`launcher::plan`]); [`config_driver`] chooses the driver.
//! - [`autopilot`]: the voter autopilot (leader only): keeps the voters at
//!   node ids `1..=replicas` (a StatefulSet's or a file's count), one change
//!   at a time, and holds the stop of a gateway being scaled away until it
//!   no longer votes; [`config_statefulset`] configures it and the node id
//!   from a StatefulSet pod name.
//! - [`address_check`]: the warning when this gateway's entry in the
//!   membership names another address than the one it advertises.
//! - [`status`]: error-to-`Status` mapping (raft-store errors with leader
//!   hints, pool rejections, object-store rejections).
//! - [`server`]: wiring, the serve loop and the bounded stop ([`server::run`],
//!   whose errors are [`server::ServeError`]; [`server::Signals`]).

/// This build's version (the workspace's), as `raft status` shows it per
/// gateway.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub mod address_check;
pub mod audit;
pub mod auth;
pub mod autopilot;
pub mod cluster_admin_service;
pub mod config;
pub mod config_check;
pub mod config_driver;
pub mod config_error;
pub mod config_pool;
pub mod config_statefulset;
pub mod config_tls;
pub mod convert;
pub mod embed;
pub mod fault;
pub mod grpc_health;
pub mod health;
pub mod http;
pub mod hub;
pub mod launcher;
pub mod log_limit;
pub mod logs;
pub mod member_credentials;
pub mod member_identity;
pub mod metrics;
pub mod object_store_service;
pub mod object_watch;
pub mod peer_relay_service;
pub mod pool_admin_service;
pub mod pool_tally;
pub mod pool_watch;
pub mod ports;
pub mod requests;
pub mod rpc_metrics;
pub mod server;
pub mod state;
pub mod status;
pub mod supervisor_host_service;
pub mod watch_wait;
