//! The state machines' snapshot decoders: `GatewayState::restore` (the
//! `LogSnapshot` of the object store and the pool, what a follower installs
//! from the network and a node loads from disk), `PoolState::decode_snapshot`
//! and `Objects::restore` on their own.
//!
//! Selector (first byte, modulo 3): 0 GatewayState, 1 pool, 2 objects.
//! What restores must snapshot to bytes that restore to the same bytes
//! (replicas compare snapshot bytes).

use gateway_plugin::state::GatewayState;
use raft_store::objects::Objects;
use raft_store::StateMachine;

/// Runs one input.
pub fn run(data: &[u8]) {
    let (selector, bytes) = super::split(data);
    match selector % 3 {
        0 => fixpoint::<GatewayState>(bytes),
        1 => {
            if let Ok(pool) = pool::PoolState::decode_snapshot(bytes) {
                let encoded = pool.encode_snapshot();
                match pool::PoolState::decode_snapshot(&encoded) {
                    Ok(again) => assert!(
                        again.encode_snapshot() == encoded,
                        "pool snapshot: re-encoding changed it"
                    ),
                    Err(e) => panic!("pool snapshot: its own encoding does not decode: {e}"),
                }
            }
        }
        _ => fixpoint::<Objects>(bytes),
    }
}

fn fixpoint<SM: StateMachine>(bytes: &[u8]) {
    let Ok(state) = SM::restore(bytes) else {
        return;
    };
    let encoded = state.snapshot();
    match SM::restore(&encoded) {
        Ok(again) => assert!(
            again.snapshot() == encoded,
            "{}: re-encoding a restored snapshot changed it",
            std::any::type_name::<SM>()
        ),
        Err(e) => panic!(
            "{}: its own snapshot does not restore: {e}",
            std::any::type_name::<SM>()
        ),
    }
}
