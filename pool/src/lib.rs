//! # pool
//!
//! The deterministic supervisor-pool state machine and the leader-side
//! coordinator of the raft-replicated coordination store.
//!
//! `pool` is pure: no clock, randomness, I/O or hash-map iteration inside
//! state. Time enters only as the [`Command::Tick`] command; replicas that
//! apply the same log reach byte-identical snapshots.
//!
//! ## Layout
//!
//! * [`command`] — the commands (prost wire format, explicit tags).
//! * [`ids`] — the one rule for identifiers (sandbox, member, object ids).
//! * [`outcome`] — [`Outcome`], [`Effect`] and the typed rejection [`Reason`].
//! * [`state`] — the [`PoolState`] (members, sandboxes, operations, launches)
//!   and its read helpers (`observed_status`, `assignment`, `status`).
//! * [`member_state`] — [`MemberState`], the one definition, with its
//!   number on every wire (snapshot and API).
//! * `apply`: `PoolState::apply`, one exhaustive match, one `apply_<variant>`
//!   per command.
//! * [`validate`] — proposal-time bounds of every command field
//!   ([`Command::validate`]).
//! * `apply::gc`: the garbage collection every `Tick` runs (records
//!   finished `retention_ticks` ago, at most [`GC_BATCH`] per tick).
//! * [`snapshot`] — table-tagged snapshot encoding; a decoded snapshot is
//!   checked against the invariants before it is returned.
//! * [`hash`] — FNV-1a 64 and the consistent-hash ring.
//! * [`coordinator`] — the leader-side proposer, driven by the gateway.
//! * [`fence`] — leader-side commands carry the raft term they were
//!   planned in; apply refuses them once a newer leader's term is applied.
//! * [`fault`] — the Jepsen-only skip-I4 switch (constant off unless built
//!   with the `fault-skip-i4` feature and turned on at start-up).
//! * [`invariants`] — I1–I6/I8 checks on one state; [`invariant_tracker`]
//!   — the same across steps (a command and the state it left).
//! * [`visibility`] — what each attached supervisor incarnation may see
//!   (its assignment view, when it is pushed, when its stream closes) and
//!   the journal of changed sandboxes that lets a push cost what changed.
//!
//! ## Example
//!
//! ```
//! use pool::{Command, Coordinator, CoordinatorConfig, Join, Launch, ObservedStatus, PoolState};
//!
//! let mut state = PoolState::new();
//! let mut index = 0;
//! let mut apply = |state: &mut PoolState, cmd: Command| {
//!     index += 1;
//!     // What the raft-store does: bytes in the log, decode, apply.
//!     let bytes = cmd.encode_to_vec();
//!     state.apply(index, &Command::decode(&bytes).expect("own encoding"))
//! };
//! apply(&mut state, Command::Join(Join {
//!     member: "sup-a".into(), uid: "u1".into(), address: "10.0.0.1:7000".into(),
//!     capacity: 4, process_id: 7, known_incarnation: 0, ..Join::default()
//! }));
//! apply(&mut state, Command::Launch(Launch {
//!     launch_id: "l1".into(), sandbox: "sb1".into(), material_ref: "obj/1".into(),
//! }));
//! assert_eq!(state.observed_status("sb1"), Some(ObservedStatus::Pending));
//!
//! // The leader's coordinator: first proposal is the leader-change grace.
//! let mut coord = Coordinator::new(CoordinatorConfig::new(1));
//! let cmds = coord.step(&state);
//! assert!(matches!(cmds[0], Command::LeaderChanged(_)));
//! let snap = state.encode_snapshot();
//! assert_eq!(PoolState::decode_snapshot(&snap).unwrap().encode_snapshot(), snap);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod apply;
pub mod command;
pub mod coordinator;
pub mod fault;
pub mod fence;
pub mod hash;
pub mod ids;
pub mod invariant_tracker;
pub mod invariants;
pub mod journal;
pub mod member_state;
pub mod outcome;
pub mod records;
pub mod snapshot;
pub mod state;
pub mod table;
pub mod validate;
pub mod visibility;

pub use command::*;
pub use coordinator::{plan, Coordinator, CoordinatorConfig};
pub use invariant_tracker::InvariantTracker;
pub use invariants::InvariantViolation;
pub use outcome::*;
pub use state::*;
pub use validate::InvalidCommand;
