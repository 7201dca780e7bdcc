//! Proposal-time validation of a command: every range a command carries
//! (`Configure` values, `max_parallel`, legacy incarnations, string sizes,
//! the ids that become record keys). Called before a command is proposed
//! (the store's `validate`, on the proposing node and on a leader taking a
//! forward), never in apply: apply of a log written by an older version
//! must not change. Apply itself never panics on any command (it uses
//! saturating arithmetic); validation keeps what reaches the log sane.
//!
//! Bounds (all inclusive):
//!
//! | field | bound |
//! | --- | --- |
//! | `Configure` ticks (ttl, recovery, operation) | 1..=[`MAX_CONFIG_TICKS`] |
//! | `Configure.retention_ticks` | 0 (unchanged) or 1..=[`MAX_CONFIG_TICKS`] |
//! | `max_parallel` | 1..=[`MAX_PARALLEL_LIMIT`] |
//! | `Join.capacity` | 1..=[`MAX_CAPACITY`] |
//! | legacy `Join.incarnation` | ..=[`MAX_COUNTER`] |
//! | member and sandbox ids | [`crate::ids`] |
//! | other ids and short strings | ..=[`MAX_SHORT_LEN`] bytes |
//! | `Launch.material_ref` | ..=[`MAX_MATERIAL_LEN`] bytes |
//! | `Report.status` | ..=[`MAX_STATUS_LEN`] bytes |
//! | `Heartbeat.beats` | ..=[`MAX_BEATS`] entries |

use crate::command::*;
use crate::ids::{check_id, InvalidId};
use crate::state::{MAX_CONFIG_TICKS, MAX_COUNTER, MAX_PARALLEL_LIMIT};

/// Longest operation id, launch id, uid, address or expected-owner field,
/// in bytes.
pub const MAX_SHORT_LEN: usize = 1024;
/// Longest launch material (`Launch.material_ref`: the workload command as
/// JSON, or a reference), in bytes. The gateway's CreateSandbox refuses a
/// longer one before proposing, naming the field; this bound only keeps
/// the same limit for a command that reaches proposal another way. It fits,
/// with the launch's other fields, in one command (64 KiB encoded).
pub const MAX_MATERIAL_LEN: usize = 32 * 1024;
/// Longest report status, in bytes.
pub const MAX_STATUS_LEN: usize = 64 * 1024;
/// Most heartbeats in one batch.
pub const MAX_BEATS: usize = 100_000;
/// Largest member capacity (sandbox slots).
pub const MAX_CAPACITY: u32 = 1_000_000;

/// A command outside the bounds of the module doc.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCommand {
    /// An id that becomes a record key breaks the id rule.
    #[error(transparent)]
    Id(#[from] InvalidId),
    /// A value outside its range.
    #[error("{field} = {value} is out of range: {range}")]
    Range {
        /// The field (`Configure.retention_ticks`).
        field: &'static str,
        /// The value given.
        value: u64,
        /// The allowed range.
        range: String,
    },
    /// A string longer than its limit.
    #[error("{field} is {len} bytes, longer than {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

type V = Result<(), InvalidCommand>;

fn range(field: &'static str, value: u64, lo: u64, hi: u64) -> V {
    if (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(InvalidCommand::Range {
            field,
            value,
            range: format!("{lo}..={hi}"),
        })
    }
}

fn len(field: &'static str, s: &str, max: usize) -> V {
    if s.len() <= max {
        Ok(())
    } else {
        Err(InvalidCommand::TooLong {
            field,
            len: s.len(),
            max,
        })
    }
}

fn short(field: &'static str, s: &str) -> V {
    len(field, s, MAX_SHORT_LEN)
}

fn configure(c: &Configure) -> V {
    let max = MAX_CONFIG_TICKS;
    range(
        "Configure.heartbeat_ttl_ticks",
        c.heartbeat_ttl_ticks,
        1,
        max,
    )?;
    range(
        "Configure.recovery_deadline_ticks",
        c.recovery_deadline_ticks,
        1,
        max,
    )?;
    range(
        "Configure.operation_deadline_ticks",
        c.operation_deadline_ticks,
        1,
        max,
    )?;
    range("Configure.retention_ticks", c.retention_ticks, 0, max)
}

fn join(c: &Join) -> V {
    check_id("member_id", &c.member)?;
    short("Join.uid", &c.uid)?;
    short("Join.address", &c.address)?;
    range(
        "Join.capacity",
        u64::from(c.capacity),
        1,
        u64::from(MAX_CAPACITY),
    )?;
    range("Join.incarnation", c.incarnation, 0, MAX_COUNTER)?;
    range(
        "Join.known_incarnation",
        c.known_incarnation,
        0,
        MAX_COUNTER,
    )
}

fn max_parallel(field: &'static str, n: u32) -> V {
    range(field, u64::from(n), 1, u64::from(MAX_PARALLEL_LIMIT))
}

impl Command {
    /// Checks every bound of the module doc.
    ///
    /// # Errors
    /// The first field out of bounds, named.
    pub fn validate(&self) -> Result<(), InvalidCommand> {
        match self {
            Command::Tick(_) | Command::LeaderChanged(_) => Ok(()),
            Command::Configure(c) => configure(c),
            Command::Join(c) => join(c),
            Command::Heartbeat(c) => {
                if c.beats.len() > MAX_BEATS {
                    return Err(InvalidCommand::Range {
                        field: "Heartbeat.beats",
                        value: c.beats.len() as u64,
                        range: format!("0..={MAX_BEATS}"),
                    });
                }
                c.beats
                    .iter()
                    .try_for_each(|b| short("Beat.member", &b.member))
            }
            Command::Leave(c) => short("Leave.member", &c.member),
            Command::Expire(c) => short("Expire.member", &c.member),
            Command::Launch(c) => {
                check_id("sandbox_id", &c.sandbox)?;
                short("Launch.launch_id", &c.launch_id)?;
                len("Launch.material_ref", &c.material_ref, MAX_MATERIAL_LEN)
            }
            Command::Takeover(c) => {
                short("Takeover.sandbox", &c.sandbox)?;
                short("Takeover.expected_owner", &c.expected_owner)
            }
            Command::Acknowledge(c) => {
                short("Acknowledge.sandbox", &c.sandbox)?;
                short("Acknowledge.member", &c.member)
            }
            Command::Report(c) => {
                short("Report.sandbox", &c.sandbox)?;
                short("Report.member", &c.member)?;
                len("Report.status", &c.status, MAX_STATUS_LEN)
            }
            Command::Stop(c) => short("Stop.sandbox", &c.sandbox),
            Command::Delete(c) => short("Delete.sandbox", &c.sandbox),
            Command::FailRecovery(c) => short("FailRecovery.sandbox", &c.sandbox),
            Command::StartDrain(c) => {
                short("StartDrain.operation_id", &c.operation_id)?;
                short("StartDrain.member", &c.member)?;
                max_parallel("StartDrain.max_parallel", c.max_parallel)
            }
            Command::StartRebalance(c) => {
                short("StartRebalance.operation_id", &c.operation_id)?;
                max_parallel("StartRebalance.max_parallel", c.max_parallel)
            }
            Command::Move(c) => {
                short("Move.operation_id", &c.operation_id)?;
                short("Move.sandbox", &c.sandbox)?;
                short("Move.expected_owner", &c.expected_owner)?;
                short("Move.to", c.to.as_deref().unwrap_or_default())
            }
            Command::CompleteOperation(c) => {
                short("CompleteOperation.operation_id", &c.operation_id)
            }
            Command::FailOperation(c) => short("FailOperation.operation_id", &c.operation_id),
            Command::CancelOperation(c) => short("CancelOperation.operation_id", &c.operation_id),
            // Apply checks the endpoint fields and the reason itself (they
            // are bounded there, since issue 14).
            Command::RecordRuntime(c) => short("RecordRuntime.sandbox", &c.sandbox),
            Command::FailLaunch(c) => short("FailLaunch.sandbox", &c.sandbox),
        }
    }
}
