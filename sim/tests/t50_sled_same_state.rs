//! The simulation's in-memory state-machine store and the gateway's real
//! one (`raft_store::state_machine::StateMachineStore`, snapshot files on
//! disk) give the same state for the same log: the simulated replicas are
//! what real ones would be.
//!
//! - given: seeds run to the end, keeping the agreed applied index, the
//!   state digest every member reached there, and one member's log up to it
//! - when: the same entries are applied, one at a time, through a
//!   `StateMachineStore<GatewayState>` opened on a temporary directory
//! - then: its state's digest (crc32 and length of the snapshot encoding)
//!   at that index is the members' digest

use gateway_plugin::state::GatewayState;
use openraft::storage::RaftStateMachine;
use raft_store::digest::Digest;
use raft_store::state_machine::StateMachineStore;

/// Seeds compared (each runs a whole scenario: a few seconds in debug).
const SEEDS: u64 = 6;

#[tokio::test]
async fn the_sled_side_store_reaches_the_simulated_state() {
    for seed in 0..SEEDS {
        let outcome = sim::run_keeping_log(seed).unwrap_or_else(|f| panic!("{f}"));
        let (agreement, entries) = outcome.agreed.expect("the log was kept");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut store =
            StateMachineStore::<GatewayState>::open(dir.path()).expect("open the store");
        let count = entries.len();
        for entry in entries {
            store.apply(vec![entry]).await.expect("apply an entry");
        }
        let digest = store.read(|a| {
            Digest::of_encoding(
                a.last_applied.map_or(0, |l| l.index),
                &raft_store::StateMachine::snapshot(&a.machine),
            )
        });
        println!(
            "seed {seed}: {count} entries; members {:?} at index {} crc {:08x} ({} bytes); \
             the real store: index {} crc {:08x} ({} bytes)",
            agreement.members,
            agreement.applied_index,
            agreement.crc32,
            agreement.bytes,
            digest.applied_index,
            digest.crc32,
            digest.bytes
        );
        assert_eq!(digest.applied_index, agreement.applied_index, "seed {seed}");
        assert_eq!(
            (digest.crc32, digest.bytes),
            (agreement.crc32, agreement.bytes),
            "seed {seed}: the real store's state differs from the simulated members'"
        );
    }
}
