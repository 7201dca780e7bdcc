//! Where sandbox workloads run: one runtime (`openshell-sandbox-runtime`)
//! per sandbox generation, launched by the gateway that leads the raft group
//! (docs/design/0003-sandbox-driver.md) through a [`SandboxDriver`]:
//!
//! - [`process`]: a local process per runtime, in its own network namespace
//!   when the driver may create one (root); local development and tests.
//! - [`kubernetes`]: a Pod per runtime, created from a template through the
//!   Kubernetes API.
//!
//! Every runtime has a [name](runtime_name) derived from its sandbox id and
//! generation. Creating is idempotent by that name: a second `ensure` (the
//! same leader retrying, or a new leader after the first died mid-launch)
//! adopts what exists and never starts a second runtime. The name is also
//! the DNS name on the runtime's serving certificate, which a CA generated
//! for that runtime alone signs ([`Endpoint::ca_pem`]); the CA's key is
//! dropped once the certificate is signed.
//!
//! Entry points: [`SandboxDriver`] (`ensure`, `list`, `delete`),
//! [`LaunchSpec`], [`RuntimeState`], [`runtime_name`].

pub mod identity;
pub mod kubernetes;
pub mod name;
pub mod process;

pub use name::runtime_name;

use async_trait::async_trait;

/// The TCP port a runtime serves on in its own network (its network
/// namespace or its Pod).
pub const RUNTIME_PORT: u16 = 7400;

/// One sandbox generation's runtime, as the launcher asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchSpec {
    /// Sandbox id (the identifier rule of `proto::ids`).
    pub sandbox_id: String,
    /// Sandbox generation, >= 1.
    pub generation: u64,
    /// The workload command; empty runs the runtime's built-in demo workload.
    pub workload: Vec<String>,
    /// Longest unsupervised time before the runtime stops the workload
    /// (`--recovery-deadline-ms`).
    pub recovery_deadline_ms: u64,
    /// Public grant keys the runtime trusts (64 hex characters each,
    /// `--cluster-public-key`), when no keys file is given.
    pub trusted_grant_keys: Vec<String>,
    /// A trusted grant keys file the runtime reads and re-reads on change
    /// (`--trusted-grant-keys-file`: a path where the runtime runs, e.g. a
    /// ConfigMap mounted by the Pod template), instead of the keys: what
    /// lets a key rotation reach runtimes that are already running.
    pub trusted_grant_keys_file: Option<String>,
}

impl LaunchSpec {
    /// The runtime's name ([`runtime_name`]).
    pub fn name(&self) -> String {
        runtime_name(&self.sandbox_id, self.generation)
    }

    /// The runtime arguments that say which grant keys it trusts: the keys
    /// file if given, else the keys.
    ///
    /// # Errors
    /// [`DriverError::Refused`] when neither is given (the runtime would
    /// trust no grant).
    pub fn trust_args(&self, driver: &'static str) -> Result<[String; 2], DriverError> {
        match &self.trusted_grant_keys_file {
            Some(file) => Ok(["--trusted-grant-keys-file".into(), file.clone()]),
            None if self.trusted_grant_keys.is_empty() => Err(DriverError::Refused {
                driver,
                message: format!(
                    "{}: no trusted grant keys (neither keys nor a keys file)",
                    self.name()
                ),
            }),
            None => Ok([
                "--cluster-public-key".into(),
                self.trusted_grant_keys.join(","),
            ]),
        }
    }
}

/// How to reach a serving runtime; recorded in the replicated state so
/// that any supervisor granted the sandbox can reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The runtime's name: the DNS name its certificate carries, which a
    /// supervisor verifies (whatever IP it dials).
    pub name: String,
    /// `ip:port`.
    pub address: String,
    /// PEM of the CA certificate that signed the runtime's certificate.
    pub ca_pem: String,
}

/// A runtime's state, as its driver sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeState {
    /// Created, not serving yet (scheduling, pulling, starting): what it
    /// waits for.
    Pending {
        /// E.g. `ContainerCreating`, `starting`.
        detail: String,
    },
    /// Serving.
    Running(Endpoint),
    /// Will never serve: it could not be scheduled or started, or it
    /// exited. `reason` is the API's own, e.g. `Unschedulable: 0/3 nodes are
    /// available: 3 Insufficient cpu.`
    Failed {
        /// The reason, as the driver's API gave it.
        reason: String,
    },
}

/// A runtime a driver manages, as one `list` saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Runtime name.
    pub name: String,
    /// Its sandbox id.
    pub sandbox_id: String,
    /// Its sandbox generation.
    pub generation: u64,
    /// State.
    pub state: RuntimeState,
}

/// Why a driver call failed.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The driver's API could not be reached or answered an error that may
    /// pass (connection refused, 5xx, timeout): the call is retried.
    #[error("{driver} driver: {message}")]
    Unavailable {
        /// `process` or `kubernetes`.
        driver: &'static str,
        /// What failed.
        message: String,
    },
    /// The launch itself is refused (the template or spec is invalid, the
    /// API rejected the object): the launch fails with this reason.
    #[error("{driver} driver refused the launch: {message}")]
    Refused {
        /// `process` or `kubernetes`.
        driver: &'static str,
        /// The reason.
        message: String,
    },
}

/// Launches, lists and removes runtimes. Implementations are idempotent by
/// runtime name: every call may be repeated, by this gateway or another.
#[async_trait]
pub trait SandboxDriver: Send + Sync + 'static {
    /// `process` or `kubernetes`.
    fn kind(&self) -> &'static str;

    /// Which runtimes this driver sees, as at most 128 bytes of printable
    /// ASCII (`process:<id of its directory>`, `kubernetes:<namespace>`):
    /// two drivers of one scope list the same runtimes. The launcher
    /// records it with each runtime and judges a recorded runtime lost
    /// only from a list of the same scope, so a gateway whose driver looks
    /// elsewhere (another directory, another namespace) never fails a
    /// healthy sandbox it cannot see.
    fn scope(&self) -> &str;

    /// Creates the runtime of `spec` unless one by its name exists, then
    /// returns its state. Never creates a second runtime for a name.
    ///
    /// # Errors
    /// [`DriverError`].
    async fn ensure(&self, spec: &LaunchSpec) -> Result<RuntimeState, DriverError>;

    /// Every runtime this driver manages, with its state (one list call).
    ///
    /// # Errors
    /// [`DriverError::Unavailable`].
    async fn list(&self) -> Result<Vec<Observed>, DriverError>;

    /// Stops and removes the runtime `name` and everything created for it
    /// (its TLS secret, its network namespace). Ok when already gone.
    ///
    /// # Errors
    /// [`DriverError::Unavailable`].
    async fn delete(&self, name: &str) -> Result<(), DriverError>;
}
