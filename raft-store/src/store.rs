//! The storage a [`crate::RaftNode`] runs on, as two traits: its raft log
//! ([`NodeLog`]) and its applied state ([`NodeMachine`]).
//!
//! A gateway runs on sled and snapshot files ([`LogStore`] and
//! [`StateMachineStore`], what [`crate::RaftNode::start`] opens). The
//! deterministic simulation (the `sim` crate) runs the same node over
//! in-memory stores that model what a crash keeps, through
//! [`crate::RaftNode::start_on`]. Both apply entries with the one
//! [`Applied::apply_entries`], so the simulated replicas reach the states
//! the real ones do.

use openraft::storage::{RaftLogStorage, RaftStateMachine};

use crate::log_store::LogStore;
use crate::state_machine::{Applied, StateMachine, StateMachineStore};
use crate::types::TypeConfig;

/// A node's raft log: openraft's log storage, shared by cloning, and the
/// last committed index openraft reported (what status shows).
pub trait NodeLog: RaftLogStorage<TypeConfig> + Clone + Send + Sync + 'static {
    /// The last committed index this node knows of.
    fn committed_index(&self) -> u64;
}

/// A node's applied state: openraft's state-machine storage, shared by
/// cloning, that local reads see.
pub trait NodeMachine<SM: StateMachine>:
    RaftStateMachine<TypeConfig> + Clone + Send + Sync + 'static
{
    /// Runs `f` on the applied state.
    fn read<T>(&self, f: impl FnOnce(&Applied<SM>) -> T) -> T;
}

/// What a running node keeps of its stores, whatever they are (openraft
/// owns them otherwise): the committed index the log last reported and
/// reads of the applied state. The stores' types end here, so a node is
/// one type, `RaftNode<SM>`, on sled and in the simulation alike, and the
/// code above it (the gateway's hub, services and leader-side actors) runs
/// unchanged on either.
pub(crate) trait Stores<SM: StateMachine>: Send + Sync + 'static {
    /// See [`NodeLog::committed_index`].
    fn committed_index(&self) -> u64;
    /// Runs `f` once on the applied state.
    fn read_applied(&self, f: &mut dyn FnMut(&Applied<SM>));
}

/// A log and a state machine as [`Stores`].
pub(crate) struct StoresOf<L, M> {
    /// The raft log.
    pub(crate) log: L,
    /// The state-machine storage.
    pub(crate) machine: M,
}

impl<SM: StateMachine, L: NodeLog, M: NodeMachine<SM>> Stores<SM> for StoresOf<L, M> {
    fn committed_index(&self) -> u64 {
        self.log.committed_index()
    }

    fn read_applied(&self, f: &mut dyn FnMut(&Applied<SM>)) {
        self.machine.read(|applied| f(applied));
    }
}

impl NodeLog for LogStore {
    fn committed_index(&self) -> u64 {
        LogStore::committed_index(self)
    }
}

impl<SM: StateMachine> NodeMachine<SM> for StateMachineStore<SM> {
    fn read<T>(&self, f: impl FnOnce(&Applied<SM>) -> T) -> T {
        StateMachineStore::read(self, f)
    }
}
