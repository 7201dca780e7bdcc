//! openraft's storage test suite against the simulation's in-memory log
//! and state machine.
//!
//! - given: a fresh simulated disk per case
//! - when: openraft's `Suite::test_all` drives the log and state machine
//! - then: every case passes, as it does for the sled stores
//!   (raft-store's t10)

#![allow(clippy::result_large_err)] // openraft's Suite returns its StorageError.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use raft_store::objects::Objects;
use raft_store::TypeConfig;
use sim::disk::Disk;
use sim::mem_log::{MemLog, SyncDelay};
use sim::mem_machine::MemMachine;

struct MemBuilder;

impl StoreBuilder<TypeConfig, MemLog, MemMachine<Objects>, Disk> for MemBuilder {
    async fn build(&self) -> Result<(Disk, MemLog, MemMachine<Objects>), StorageError<u64>> {
        let disk = Disk::new();
        let log = MemLog::open(disk.clone(), 1, SyncDelay::none())
            .map_err(|e| openraft::StorageIOError::read(&e))?;
        let machine = MemMachine::open(disk.clone())
            .map_err(|e| openraft::StorageIOError::read(&std::io::Error::other(e.to_string())))?;
        Ok((disk, log, machine))
    }
}

#[test]
fn in_memory_stores_pass_openraft_suite() -> Result<(), StorageError<u64>> {
    Suite::test_all(MemBuilder)
}
