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
