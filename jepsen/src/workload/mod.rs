//! Workloads: the clients that generate the history.
//!
//! - [`register`]: read / write / cas registers over the object store
//!   (linearizability, acknowledged writes, one version per write, watch
//!   events); its cas reads first or uses the client's own last version
//!   ([`CasMode`]).
//! - [`pool`]: sandboxes launched, read and deleted, pool members and pool
//!   faults (the invariants I1–I8); its members are in [`crate::members`].
//!
//! Each workload documents its `f` names next to it (HISTORY.md); the typed
//! values of its events are in [`crate::ops`].

use std::sync::Arc;
use std::time::Duration;

use crate::checker::Checker;
use crate::cluster::Cluster;
use crate::history::Recorder;
use local_cluster::gateway::GatewaySection;

pub mod pool;
pub mod register;

pub use pool::{MemberKind, PoolOptions};
pub use register::{CasMode, Failover, RegisterOptions};

/// A workload: clients, final reads, checkers.
pub enum Workload {
    /// Read/write/cas registers over the object store.
    Register(RegisterOptions),
    /// Sandboxes, supervisors and pool faults over the pool admin API.
    Pool(PoolOptions),
}

/// A running workload's handle.
pub enum Running {
    /// The register workload.
    Register(register::RegisterRunning),
    /// The pool workload.
    Pool(pool::PoolRunning),
}

impl Workload {
    /// Starts the clients.
    ///
    /// # Errors
    /// When the pool workload's member processes cannot be started.
    pub async fn start(
        &self,
        cluster: Arc<Cluster>,
        history: Recorder,
        seed: u64,
    ) -> anyhow::Result<Running> {
        Ok(match self {
            Workload::Register(options) => {
                Running::Register(register::start(options, cluster, history, seed).await)
            }
            Workload::Pool(options) => Running::Pool(pool::start(options, cluster, history, seed)?),
        })
    }

    /// Before the gateways start: what the workload needs of them (the pool
    /// with process members: the members namespace and the gateways'
    /// sandbox driver, [`pool::prepare`]).
    ///
    /// # Errors
    /// A missing binary; a namespace that cannot be made.
    pub fn prepare(&self, cluster: &mut Cluster) -> anyhow::Result<()> {
        match self {
            Workload::Register(_) => Ok(()),
            Workload::Pool(options) => pool::prepare(options, cluster),
        }
    }

    /// Name in reports (`register`, `pool`).
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Register(_) => "register",
            Workload::Pool(_) => "pool",
        }
    }

    /// Extra gateway arguments this workload needs.
    /// The pool members the run will start (none for `register`).
    pub fn member_ids(&self) -> Vec<String> {
        match self {
            Workload::Register(_) => Vec::new(),
            Workload::Pool(o) => pool::member_ids(o),
        }
    }

    /// Extra command-line arguments of every gateway.
    pub fn gateway_config(&self) -> GatewaySection {
        match self {
            Workload::Register(_) => GatewaySection::default(),
            Workload::Pool(o) => o.gateway_config(),
        }
    }
}

impl Running {
    /// Stops the clients and waits for their last operations.
    pub async fn stop(&mut self) {
        match self {
            Running::Register(r) => r.stop().await,
            Running::Pool(p) => p.stop().await,
        }
    }

    /// The workload's final reads; returns its checkers.
    pub async fn final_reads(&mut self, within: Duration) -> Vec<Box<dyn Checker>> {
        match self {
            Running::Register(r) => r.final_reads(within).await,
            Running::Pool(p) => p.final_reads(within).await,
        }
    }
}
