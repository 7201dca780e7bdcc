//! openraft's storage test suite against the sled log store and the
//! snapshot-file state machine.
//!
//! - given: a fresh data directory per case
//! - when: openraft's `Suite::test_all` drives the log and state machine
//! - then: every case passes

#![allow(clippy::result_large_err)] // openraft's Suite returns its StorageError.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use raft_store::db::DataDir;
use raft_store::log_store::LogStore;
use raft_store::objects::Objects;
use raft_store::state_machine::StateMachineStore;
use raft_store::TypeConfig;
use tempfile::TempDir;

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore<Objects>, TempDir> for SledBuilder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore, StateMachineStore<Objects>), StorageError<u64>> {
        let dir = TempDir::new().map_err(|e| openraft::StorageIOError::read(&e))?;
        let data = DataDir::open(dir.path(), "suite", 1, 8 * 1024 * 1024)
            .map_err(|e| openraft::StorageIOError::read(&std::io::Error::other(e.to_string())))?;
        let log = LogStore::new(&data)?;
        let sm = StateMachineStore::open(dir.path())
            .map_err(|e| openraft::StorageIOError::read(&std::io::Error::other(e.to_string())))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn sled_store_passes_openraft_suite() -> Result<(), StorageError<u64>> {
    Suite::test_all(SledBuilder)
}
