//! The gateway's replicated state: the object store and (next) the pool,
//! applied from one log, so one command may touch both atomically.
//!
//! Wire format: `openshell.gateway.v1.LogCommand` / `LogResult` /
//! `LogSnapshot` (see `proto/openshell/gateway/v1/log.proto`).

use prost::Message;
use proto::gateway::{log_command, log_result, LogCommand, LogResult, LogSnapshot};
use proto::objects::{ObjectCommand, ObjectResult};
use raft_store::objects::Objects;
use raft_store::StateMachine;

/// Everything the gateway replicates.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GatewayState {
    /// The generic object store.
    pub objects: Objects,
}

impl GatewayState {
    /// Encodes an object-store command as a log command.
    pub fn object_command(command: ObjectCommand) -> Vec<u8> {
        LogCommand {
            command: Some(log_command::Command::Objects(command)),
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
}

impl StateMachine for GatewayState {
    fn validate(command: &[u8]) -> Result<(), String> {
        let command = LogCommand::decode(command).map_err(|e| format!("not a LogCommand: {e}"))?;
        match command.command {
            Some(log_command::Command::Objects(c)) => Objects::validate_command(&c),
            Some(log_command::Command::Pool(_)) => {
                Err("pool commands are not accepted by this build".into())
            }
            None => Err("log command is empty".into()),
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
            Some(log_command::Command::Pool(_)) | None => {
                panic!("log command at index {index} passed validation but has no handler")
            }
        };
        LogResult {
            result: Some(result),
        }
        .encode_to_vec()
    }

    fn snapshot(&self) -> Vec<u8> {
        LogSnapshot {
            objects: Some(self.objects.to_snapshot()),
            pool: Vec::new(),
        }
        .encode_to_vec()
    }

    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let snapshot = LogSnapshot::decode(bytes).map_err(|e| format!("not a LogSnapshot: {e}"))?;
        let objects = Objects::from_snapshot(snapshot.objects.unwrap_or_default())?;
        Ok(GatewayState { objects })
    }
}
