//! A command a follower forwards to the leader (`RaftTransport.Forward`,
//! and the gateway's own services before they propose):
//! `GatewayState::validate` decodes and checks it; a command that passes
//! must never make `apply` panic (the `StateMachine` contract), so it is
//! applied to an empty state and to the seed state of [`crate::seeds`].

use std::sync::OnceLock;

use gateway_plugin::state::GatewayState;
use raft_store::StateMachine;

/// The log index the fuzzed command applies at: after the seed state's.
const INDEX: u64 = 1_000;

/// Runs one input.
pub fn run(data: &[u8]) {
    if GatewayState::validate(data).is_err() {
        return;
    }
    static SEEDED: OnceLock<GatewayState> = OnceLock::new();
    let seeded = SEEDED.get_or_init(crate::seeds::gateway_state);
    GatewayState::default().apply(INDEX, data);
    seeded.clone().apply(INDEX, data);
}
