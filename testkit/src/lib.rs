//! `testkit`: what the workspace's end-to-end tests share, in one crate
//! instead of `#[path]` includes and copies (the way raft-rs keeps its
//! `harness/`).
//!
//! A dev-dependency of `gateway-plugin`, `supervisor` and `cli`; a normal
//! dependency of `jepsen`, which is itself a test harness (README.md says
//! why the scripted member lives here). Never a normal dependency of a crate
//! that ships.
//!
//! # Layout
//! - [`bins`]: the workspace's binaries, built up to date once per test
//!   process (`cargo build --workspace --bins`).
//! - [`ports`]: free loopback ports.
//! - [`gateway`]: `openshell-gateway` processes ([`gateway::Gateway`], a
//!   bootstrapped [`gateway::Cluster`]) and object helpers.
//! - [`supervisor`]: `openshell-supervisor` processes
//!   ([`supervisor::Supervisor`]) and the pool helpers of the supervision
//!   scenarios.
//! - [`runtimes`]: the runtimes a cluster's gateways launch with the
//!   process driver (entries, a verified client, clean-up).
//! - [`root`]: counted skips of tests that need root.
//! - [`secure`]: TLS material (a throwaway CA, certificates, signing key,
//!   admin token) for secure end-to-end tests.
//! - [`member`]: the scripted supervisor member (the stream protocol, and
//!   [`member::ScriptedMember`]).
//! - [`kube_api`]: a mock Kubernetes API (TokenReview) on loopback and a
//!   kubeconfig naming it, for gateway processes.
//!
//! # Example
//!
//! ```no_run
//! # async fn example() -> testkit::TestResult {
//! use testkit::gateway::{put, Cluster};
//! let cluster = Cluster::start(3, &[]);
//! let leader = cluster.wait_leader("bootstrap").await;
//! put(cluster.get(leader), "k", "v").await?;
//! # Ok(())
//! # }
//! ```

pub mod bins;
pub mod gateway;
pub mod kube_api;
pub mod member;
pub mod ports;
pub mod root;
pub mod runtimes;
pub mod secure;
pub mod supervisor;

pub use root::{is_root, skip_without_root};

/// What test helpers return: any error, boxed.
pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
