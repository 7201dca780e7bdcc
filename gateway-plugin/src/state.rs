//! The gateway's replicated state: the object store and the supervisor pool,
//! applied from one log, so one command may touch both atomically.
//!
//! Wire format: `openshell.gateway.v1.LogCommand` / `LogResult` /
//! `LogSnapshot` (see `proto/openshell/gateway/v1/log.proto`). Pool commands
//! and the pool snapshot table are in the `pool` crate's own protobuf format;
//! a pool command's result travels back to its proposer as JSON of
//! [`pool::Outcome`] (a response, never stored).

use prost::Message;
use proto::gateway::{log_command, log_result, LogCommand, LogResult, LogSnapshot};
use proto::objects::{ObjectCommand, ObjectResult};
use raft_store::objects::Objects;
use raft_store::{InvalidCommand, SnapshotError, StateMachine};

/// Everything the gateway replicates.
#[derive(Clone, Debug, Default)]
pub struct GatewayState {
    /// The generic object store.
    pub objects: Objects,
    /// The supervisor pool.
    pub pool: pool::PoolState,
    /// Which sandboxes the pool commands applied here touched, and which
    /// member incarnations owned them before and after, so the hub pushes
    /// assignment views at the cost of what changed. Not replicated
    /// state: not in the snapshot, empty after a restore (the hub then
    /// computes views in full until the journal reaches back far enough).
    pub pool_changes: pool::visibility::ChangeLog,
    /// What the pool commands applied here did, for the metrics. Not
    /// replicated state either: never read by apply, not in the snapshot,
    /// zero after a restore.
    pub pool_tally: crate::pool_tally::PoolTally,
}

impl GatewayState {
    /// Encodes an object-store command as a log command.
    pub fn object_command(command: ObjectCommand) -> Vec<u8> {
        LogCommand {
            command: Some(log_command::Command::Objects(command)),
        }
        .encode_to_vec()
    }

    /// Encodes a pool command as a log command.
    pub fn pool_command(command: &pool::Command) -> Vec<u8> {
        LogCommand {
            command: Some(log_command::Command::Pool(command.encode_to_vec())),
        }
        .encode_to_vec()
    }

    /// Decodes the result of an object-store command.
    ///
    /// # Errors
    /// When the bytes are not the result of an object-store command.
    pub fn object_result(bytes: &[u8]) -> Result<ObjectResult, String> {
        match LogResult::decode(bytes).map_err(|e| e.to_string())?.result {
            Some(log_result::Result::Objects(r)) => Ok(r),
            other => Err(format!("expected an object-store result, got {other:?}")),
        }
    }

    /// Decodes the outcome of a pool command.
    ///
    /// # Errors
    /// When the bytes are not the result of a pool command.
    pub fn pool_outcome(bytes: &[u8]) -> Result<pool::Outcome, String> {
        match LogResult::decode(bytes).map_err(|e| e.to_string())?.result {
            Some(log_result::Result::Pool(json)) => {
                serde_json::from_slice(&json).map_err(|e| e.to_string())
            }
            other => Err(format!("expected a pool outcome, got {other:?}")),
        }
    }
}

impl StateMachine for GatewayState {
    fn validate(command: &[u8]) -> Result<(), InvalidCommand> {
        let command = LogCommand::decode(command)
            .map_err(|e| InvalidCommand::new(format!("not a LogCommand: {e}")))?;
        match command.command {
            Some(log_command::Command::Objects(c)) => {
                Objects::validate_command(&c).map_err(InvalidCommand::new)
            }
            Some(log_command::Command::Pool(bytes)) => pool::Command::decode(&bytes)
                .map_err(|e| InvalidCommand::new(format!("not a pool command: {e}")))?
                .validate()
                .map_err(|e| InvalidCommand::new(e.to_string())),
            None => Err(InvalidCommand::new("log command is empty")),
        }
    }

    /// One arm per table; each hands off to that table's apply.
    fn apply(&mut self, index: u64, command: &[u8]) -> Vec<u8> {
        let command = match LogCommand::decode(command) {
            Ok(c) => c,
            Err(e) => panic!("undecodable log command at index {index}: {e}"),
        };
        let result = match command.command {
            Some(log_command::Command::Objects(c)) => {
                log_result::Result::Objects(self.objects.apply_command(index, &c))
            }
            Some(log_command::Command::Pool(bytes)) => {
                let command = match pool::Command::decode(&bytes) {
                    Ok(c) => c,
                    Err(e) => panic!("undecodable pool command at index {index}: {e}"),
                };
                let outcome = self.pool_changes.apply(&mut self.pool, index, &command);
                self.pool_tally.record(&self.pool, &command, &outcome);
                match serde_json::to_vec(&outcome) {
                    Ok(json) => log_result::Result::Pool(json),
                    Err(e) => panic!("pool outcome at index {index} cannot be encoded: {e}"),
                }
            }
            None => panic!("empty log command at index {index} passed validation"),
        };
        LogResult {
            result: Some(result),
        }
        .encode_to_vec()
    }

    fn snapshot(&self) -> Vec<u8> {
        LogSnapshot {
            objects: Some(self.objects.to_snapshot()),
            pool: self.pool.encode_snapshot(),
        }
        .encode_to_vec()
    }

    fn restore(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let snapshot = LogSnapshot::decode(bytes)
            .map_err(|e| SnapshotError::new(format!("not a LogSnapshot: {e}")))?;
        let objects = Objects::from_snapshot(snapshot.objects.unwrap_or_default())?;
        let pool = if snapshot.pool.is_empty() {
            pool::PoolState::new()
        } else {
            pool::PoolState::decode_snapshot(&snapshot.pool)
                .map_err(|e| SnapshotError::new(format!("pool table: {e}")))?
        };
        Ok(GatewayState {
            objects,
            pool,
            pool_changes: pool::visibility::ChangeLog::new(),
            pool_tally: crate::pool_tally::PoolTally::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_log_drives_both_tables_and_snapshots_round_trip() {
        let mut state = GatewayState::default();
        let join = pool::Command::Join(pool::Join {
            member: "m1".into(),
            uid: "u1".into(),
            address: "10.0.0.1".into(),
            capacity: 4,
            process_id: 1,
            ..pool::Join::default()
        });
        let bytes = GatewayState::pool_command(&join);
        assert!(GatewayState::validate(&bytes).is_ok());
        let reply = state.apply(1, &bytes);
        let outcome = GatewayState::pool_outcome(&reply).unwrap_or_else(|e| panic!("{e}"));
        assert!(!outcome.is_rejected(), "{outcome:?}");
        let snap = state.snapshot();
        let restored = GatewayState::restore(&snap).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(restored.snapshot(), snap);
        assert!(GatewayState::validate(&GatewayState::pool_command(&join)[..3]).is_err());
    }
}
