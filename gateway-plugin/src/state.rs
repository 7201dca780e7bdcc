//! The gateway's replicated state: the object store and the supervisor pool,
//! applied from one log, so one command may touch both atomically.
//!
//! Wire format: `openshell.gateway.v1.LogCommand` / `LogResult` /
//! `LogSnapshot` (see `proto/openshell/gateway/v1/log.proto`). Pool commands
//! and the pool snapshot table are in the `pool` crate's own protobuf format;
//! a pool command's result travels back to its proposer as JSON of
//! [`pool::Outcome`] (a response, never stored).
//!
//! A command may carry a client request id (`LogCommand.request_id`): apply
//! remembers its outcome in [`RequestTable`] (part of the snapshot, FIFO by
//! apply order) and answers a later command with the same id with that
//! outcome, `replayed` set, changing nothing. So a client may retry a write
//! whose outcome it does not know without applying it twice. The command
//! also carries the fingerprint of the client's request
//! (`LogCommand.request_fingerprint`, [`crate::requests::fingerprint`]),
//! kept next to the outcome: a command whose id is remembered with another
//! fingerprint is another write reusing the id, and is answered
//! `RequestIdReused` (nothing applied, nothing recorded). Entries and
//! snapshot records from before fingerprints have none and match by id
//! alone, so an old log replays to the same state as before.

use prost::Message;
use proto::gateway::{
    log_command, log_result, LogCommand, LogResult, LogSnapshot, RequestIdReused,
};
use proto::objects::{object_command, object_result, Object, ObjectCommand, ObjectResult};
use raft_store::object_events::ObjectEvents;
use raft_store::objects::Objects;
use raft_store::{InvalidCommand, SnapshotError, StateMachine};

use crate::requests::{
    check_fingerprint, check_request_id, fingerprint_of, Remembered, RequestTable,
    REQUEST_TABLE_CAPACITY,
};

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
    /// The object store's recent writes as watch events (`ObjectStore.Watch`).
    /// Not replicated state: never read by apply, not in the snapshot;
    /// after a restore it starts at the snapshot's revision.
    pub object_events: ObjectEvents,
    /// What the pool commands applied here did, for the metrics. Not
    /// replicated state either: never read by apply, not in the snapshot,
    /// zero after a restore.
    pub pool_tally: crate::pool_tally::PoolTally,
    /// The outcomes of recent writes that carried a client request id.
    pub requests: RequestTable,
}

impl GatewayState {
    /// An empty state whose request table remembers `capacity` ids (tests;
    /// the gateway uses [`REQUEST_TABLE_CAPACITY`]).
    pub fn with_request_capacity(capacity: usize) -> Self {
        GatewayState {
            requests: RequestTable::with_capacity(capacity),
            ..GatewayState::default()
        }
    }

    /// Encodes an object-store command as a log command, carrying the put's
    /// or delete's `request_id` (if any) as the log command's, with the
    /// fingerprint of the put or delete request (the client's own request:
    /// the command is made of it).
    pub fn object_command(command: ObjectCommand) -> Vec<u8> {
        let (request_id, request_fingerprint) = match &command.op {
            Some(object_command::Op::Put(put)) if !put.request_id.is_empty() => (
                put.request_id.clone(),
                fingerprint_of("objects.Put", put, |p| p.request_id.clear()),
            ),
            Some(object_command::Op::Delete(delete)) if !delete.request_id.is_empty() => (
                delete.request_id.clone(),
                fingerprint_of("objects.Delete", delete, |d| d.request_id.clear()),
            ),
            _ => (String::new(), Vec::new()),
        };
        LogCommand {
            command: Some(log_command::Command::Objects(command)),
            request_id,
            request_fingerprint,
        }
        .encode_to_vec()
    }

    /// Encodes a pool command as a log command.
    pub fn pool_command(command: &pool::Command) -> Vec<u8> {
        Self::pool_command_with_id(command, "", &[])
    }

    /// Encodes a pool command as a log command carrying the client request
    /// id `request_id` (empty: none) and the [`fingerprint`] of the
    /// client's request the command was made from (empty without an id).
    pub fn pool_command_with_id(
        command: &pool::Command,
        request_id: &str,
        request_fingerprint: &[u8],
    ) -> Vec<u8> {
        LogCommand {
            command: Some(log_command::Command::Pool(command.encode_to_vec())),
            request_id: request_id.to_string(),
            request_fingerprint: if request_id.is_empty() {
                Vec::new()
            } else {
                request_fingerprint.to_vec()
            },
        }
        .encode_to_vec()
    }

    /// Decodes a write's reply once: what it says and whether it replays
    /// an earlier outcome.
    ///
    /// # Errors
    /// When the bytes are not a log result, or a pool outcome in it is not
    /// JSON of [`pool::Outcome`].
    pub fn reply(bytes: &[u8]) -> Result<Replied, String> {
        let result = LogResult::decode(bytes).map_err(|e| e.to_string())?;
        let reply = match result.result {
            Some(log_result::Result::Objects(r)) => Reply::Objects(r),
            Some(log_result::Result::Pool(json)) => {
                Reply::Pool(serde_json::from_slice(&json).map_err(|e| e.to_string())?)
            }
            Some(log_result::Result::RequestIdReused(r)) => {
                Reply::RequestIdReused { first: r.log_index }
            }
            None => return Err("an empty log result".into()),
        };
        Ok(Replied {
            reply,
            replayed: result.replayed.then_some(result.replayed_index),
        })
    }

    /// Decodes the outcome of a pool command.
    ///
    /// # Errors
    /// When the bytes are not the result of a pool command.
    pub fn pool_outcome(bytes: &[u8]) -> Result<pool::Outcome, String> {
        match Self::reply(bytes)?.reply {
            Reply::Pool(outcome) => Ok(outcome),
            other => Err(format!("expected a pool outcome, got {other:?}")),
        }
    }

    #[cfg(test)]
    fn reused(bytes: &[u8]) -> Result<Option<u64>, String> {
        Ok(match Self::reply(bytes)?.reply {
            Reply::RequestIdReused { first } => Some(first),
            _ => None,
        })
    }

    #[cfg(test)]
    fn replayed(bytes: &[u8]) -> Result<Option<u64>, String> {
        Ok(Self::reply(bytes)?.replayed)
    }

    #[cfg(test)]
    fn object_result(bytes: &[u8]) -> Result<ObjectResult, String> {
        match Self::reply(bytes)?.reply {
            Reply::Objects(r) => Ok(r),
            other => Err(format!("expected an object-store result, got {other:?}")),
        }
    }
}

/// What a write's reply says ([`GatewayState::reply`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// The result of an object-store command.
    Objects(ObjectResult),
    /// The outcome of a pool command.
    Pool(pool::Outcome),
    /// The command's request id was first used for another write, applied
    /// at log index `first`: nothing was applied.
    RequestIdReused {
        /// The log index that applied the first write with the id.
        first: u64,
    },
}

/// A decoded reply ([`GatewayState::reply`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Replied {
    /// What the reply says.
    pub reply: Reply,
    /// On a remembered outcome returned for a retried request id: the log
    /// index that applied the write (`None`: a fresh outcome).
    pub replayed: Option<u64>,
}

impl StateMachine for GatewayState {
    fn validate(command: &[u8]) -> Result<(), InvalidCommand> {
        let command = LogCommand::decode(command)
            .map_err(|e| InvalidCommand::new(format!("not a LogCommand: {e}")))?;
        check_request_id(&command.request_id).map_err(InvalidCommand::new)?;
        check_fingerprint(&command.request_fingerprint).map_err(InvalidCommand::new)?;
        if command.request_id.is_empty() && !command.request_fingerprint.is_empty() {
            return Err(InvalidCommand::new(
                "a request fingerprint without a request_id",
            ));
        }
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

    /// A remembered request id answers with its first outcome; otherwise
    /// one arm per table, each handing off to that table's apply.
    fn apply(&mut self, index: u64, command: &[u8]) -> Vec<u8> {
        let command = match LogCommand::decode(command) {
            Ok(c) => c,
            Err(e) => panic!("undecodable log command at index {index}: {e}"),
        };
        if let Some(replay) = self.replay(&command) {
            return replay.encode_to_vec();
        }
        let result = match &command.command {
            Some(log_command::Command::Objects(c)) => {
                let result = self.objects.apply_command(index, c);
                self.object_events.record(c, &result);
                log_result::Result::Objects(result)
            }
            Some(log_command::Command::Pool(bytes)) => {
                let command = match pool::Command::decode(bytes.as_slice()) {
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
        if !command.request_id.is_empty() {
            let write = Remembered {
                log_index: index,
                result: remembered(&result),
                fingerprint: command.request_fingerprint.clone(),
            };
            self.requests.record(&command.request_id, write);
        }
        LogResult {
            result: Some(result),
            ..LogResult::default()
        }
        .encode_to_vec()
    }

    fn snapshot(&self) -> Vec<u8> {
        LogSnapshot {
            objects: Some(self.objects.to_snapshot()),
            pool: self.pool.encode_snapshot(),
            requests: self.requests.to_records(),
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
        let requests = RequestTable::from_records(snapshot.requests, REQUEST_TABLE_CAPACITY)?;
        Ok(GatewayState {
            object_events: ObjectEvents::starting_at(objects.revision()),
            objects,
            pool,
            pool_changes: pool::visibility::ChangeLog::new(),
            pool_tally: crate::pool_tally::PoolTally::default(),
            requests,
        })
    }

    /// The reports' and operations' log indexes and the remembered
    /// requests'.
    fn highest_recorded_index(&self) -> u64 {
        let reports = self
            .pool
            .sandboxes()
            .values()
            .filter_map(|s| s.last_report.as_ref().map(|r| r.index));
        let operations = self.pool.operations().values().map(|o| o.created_index);
        let requests = self.requests.to_records().into_iter().map(|r| r.log_index);
        reports.chain(operations).chain(requests).max().unwrap_or(0)
    }
}

impl GatewayState {
    /// The answer to a command whose request id is remembered: the
    /// remembered outcome, marked replayed, for a retry; `RequestIdReused`
    /// for another write under the id ([`Remembered::is_other_write`]).
    /// Either changes nothing. A put's outcome is rebuilt from the retried
    /// command's object at the remembered version (the table keeps only
    /// type, id and version).
    fn replay(&self, command: &LogCommand) -> Option<LogResult> {
        if command.request_id.is_empty() {
            return None;
        }
        let write = self.requests.get(&command.request_id)?;
        if write.is_other_write(&command.request_fingerprint) {
            return Some(LogResult {
                result: Some(log_result::Result::RequestIdReused(RequestIdReused {
                    log_index: write.log_index,
                })),
                ..LogResult::default()
            });
        }
        let mut result = write.result.clone();
        result.replayed = true;
        result.replayed_index = write.log_index;
        if let (
            Some(log_result::Result::Objects(ObjectResult {
                result: Some(object_result::Result::Put(stored)),
            })),
            Some(log_command::Command::Objects(ObjectCommand {
                op: Some(object_command::Op::Put(put)),
            })),
        ) = (&mut result.result, &command.command)
        {
            if let Some(object) = &put.object {
                *stored = Object {
                    resource_version: stored.resource_version,
                    ..object.clone()
                };
            }
        }
        Some(result)
    }
}

/// What the request table keeps of an outcome: all of it, except a put's
/// object, of which only (type, id, resource_version) (its payload may be
/// 32 KiB; the retried command carries it again).
fn remembered(result: &log_result::Result) -> LogResult {
    let result = match result {
        log_result::Result::Objects(ObjectResult {
            result: Some(object_result::Result::Put(object)),
        }) => log_result::Result::Objects(ObjectResult {
            result: Some(object_result::Result::Put(Object {
                id: object.id.clone(),
                r#type: object.r#type.clone(),
                resource_version: object.resource_version,
                ..Object::default()
            })),
        }),
        other => other.clone(),
    };
    LogResult {
        result: Some(result),
        ..LogResult::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::fingerprint;

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

    fn cas_put(id: &str, value: &str, version: u64, request_id: &str) -> Vec<u8> {
        use proto::objects::{precondition, Precondition, PutRequest};
        GatewayState::object_command(ObjectCommand {
            op: Some(object_command::Op::Put(PutRequest {
                object: Some(Object {
                    r#type: "t".into(),
                    id: id.into(),
                    payload: value.as_bytes().to_vec(),
                    ..Object::default()
                }),
                precondition: Some(Precondition {
                    kind: Some(if version == 0 {
                        precondition::Kind::MustCreate(true)
                    } else {
                        precondition::Kind::MatchResourceVersion(version)
                    }),
                }),
                request_id: request_id.into(),
            })),
        })
    }

    fn put_version(reply: &[u8]) -> Option<u64> {
        match GatewayState::object_result(reply).ok()?.result {
            Some(object_result::Result::Put(o)) => Some(o.resource_version),
            _ => None,
        }
    }

    fn join(member: &str) -> pool::Command {
        pool::Command::Join(pool::Join {
            member: member.into(),
            uid: format!("uid-{member}"),
            address: "10.0.0.1".into(),
            capacity: 4,
            process_id: 1,
            ..pool::Join::default()
        })
    }

    /// A fingerprint of a request naming `what`.
    fn print(what: &str) -> Vec<u8> {
        fingerprint("test.Create", what.as_bytes())
    }

    fn delete(id: &str, request_id: &str) -> Vec<u8> {
        GatewayState::object_command(ObjectCommand {
            op: Some(object_command::Op::Delete(proto::objects::DeleteRequest {
                r#type: "t".into(),
                id: id.into(),
                precondition: None,
                request_id: request_id.into(),
            })),
        })
    }

    fn launch(sandbox: &str) -> pool::Command {
        pool::Command::Launch(pool::Launch {
            launch_id: sandbox.into(),
            sandbox: sandbox.into(),
            material_ref: "demo".into(),
        })
    }

    /// A CAS put retried with its request id after it applied is answered
    /// with the first outcome and changes nothing; the same retry without an
    /// id would be a conflict (the version moved).
    #[test]
    fn a_retried_object_write_with_a_known_id_applies_once_and_replays_its_outcome() {
        let mut state = GatewayState::default();
        assert_eq!(
            put_version(&state.apply(1, &cas_put("a", "v0", 0, ""))),
            Some(1)
        );
        let first = state.apply(2, &cas_put("a", "v1", 1, "req-1"));
        assert_eq!(put_version(&first), Some(2));
        assert_eq!(GatewayState::replayed(&first), Ok(None));
        let before = state.snapshot();

        let retry = state.apply(3, &cas_put("a", "v1", 1, "req-1"));
        assert_eq!(state.snapshot(), before, "a replay changes nothing");
        assert_eq!(GatewayState::replayed(&retry), Ok(Some(2)));
        let replayed = GatewayState::object_result(&retry).expect("object result");
        assert_eq!(
            replayed,
            GatewayState::object_result(&first).expect("object result"),
            "the same outcome, payload included"
        );
        assert_eq!(
            state.objects.get("t", "a").map(|o| o.payload.clone()),
            Some(b"v1".to_vec())
        );

        let unidentified = state.apply(4, &cas_put("a", "v1", 1, ""));
        assert_eq!(
            put_version(&unidentified),
            None,
            "without an id: a conflict"
        );
    }

    /// A pool write retried with its request id is answered with its first
    /// outcome (not the pool's own "admitted earlier" replay) and changes
    /// nothing.
    #[test]
    fn a_retried_pool_write_with_a_known_id_applies_once_and_replays_its_outcome() {
        let mut state = GatewayState::default();
        state.apply(1, &GatewayState::pool_command(&join("m1")));
        let first = state.apply(
            2,
            &GatewayState::pool_command_with_id(&launch("sb1"), "req-9", &print("sb1")),
        );
        let before = state.snapshot();
        let retry = state.apply(
            3,
            &GatewayState::pool_command_with_id(&launch("sb1"), "req-9", &print("sb1")),
        );
        assert_eq!(state.snapshot(), before, "a replay changes nothing");
        assert_eq!(GatewayState::replayed(&retry), Ok(Some(2)));
        assert_eq!(
            GatewayState::pool_outcome(&retry),
            GatewayState::pool_outcome(&first)
        );
    }

    /// Once more ids than the window holds have been applied after it, an
    /// id is forgotten and its retry applies again (the window is FIFO by
    /// apply order).
    #[test]
    fn a_request_id_is_forgotten_after_the_window() {
        let mut state = GatewayState::with_request_capacity(3);
        state.apply(1, &cas_put("a", "v", 0, "old"));
        for (i, id) in ["b", "c", "d"].iter().enumerate() {
            state.apply(2 + i as u64, &cas_put(id, "v", 0, &format!("id-{id}")));
        }
        assert!(state.requests.get("old").is_none());
        assert!(state.requests.get("id-b").is_some());
        // The retry of the forgotten write applies again: must-create fails.
        let retry = state.apply(9, &cas_put("a", "v", 0, "old"));
        assert_eq!(GatewayState::replayed(&retry), Ok(None));
        assert_eq!(put_version(&retry), None);
    }

    /// Two replicas apply the same log (one restarts from a snapshot
    /// halfway) and reach byte-identical snapshots, request table included.
    #[test]
    fn replicas_applying_the_same_log_keep_identical_request_tables() {
        let mut log = vec![GatewayState::pool_command(&join("m1"))];
        for i in 0..40u64 {
            let id = format!("r{}", i % 7);
            log.push(cas_put(&format!("o{}", i % 5), "v", 0, &id));
            log.push(GatewayState::pool_command_with_id(
                &launch(&format!("s{i}")),
                &format!("p{}", i % 9),
                &print(&format!("s{i}")),
            ));
        }
        let mut a = GatewayState::with_request_capacity(8);
        let mut b = GatewayState::with_request_capacity(8);
        for (i, command) in log.iter().enumerate() {
            let index = i as u64 + 1;
            assert_eq!(
                a.apply(index, command),
                b.apply(index, command),
                "reply at {index}"
            );
            if index == 30 {
                let restored = GatewayState::restore(&b.snapshot()).expect("restore");
                b = GatewayState {
                    requests: RequestTable::from_records(restored.requests.to_records(), 8)
                        .expect("records"),
                    ..restored
                };
            }
        }
        assert_eq!(a.snapshot(), b.snapshot());
        assert_eq!(a.requests.len(), 8);
    }

    /// The snapshot carries the request table; a snapshot written before
    /// request ids existed (no table) still restores, with an empty one.
    #[test]
    fn the_request_table_round_trips_and_old_snapshots_restore() {
        let mut state = GatewayState::default();
        state.apply(1, &cas_put("a", "v", 0, "req-a"));
        state.apply(
            2,
            &GatewayState::pool_command_with_id(&join("m1"), "req-j", &print("j")),
        );
        let bytes = state.snapshot();
        let restored = GatewayState::restore(&bytes).expect("restore");
        assert_eq!(restored.requests, state.requests);
        assert_eq!(restored.snapshot(), bytes);

        let old = LogSnapshot {
            objects: Some(state.objects.to_snapshot()),
            pool: state.pool.encode_snapshot(),
            requests: Vec::new(),
        }
        .encode_to_vec();
        let restored = GatewayState::restore(&old).expect("old snapshot");
        assert!(restored.requests.is_empty());
        assert_eq!(restored.objects, state.objects);
    }

    /// Another write under a remembered id (another object, a delete, a
    /// pool command) is answered `RequestIdReused` naming the first
    /// write's index, changes nothing and is not remembered; the retry of
    /// the first write still replays.
    #[test]
    fn another_write_under_a_remembered_id_is_refused_and_changes_nothing() {
        let mut state = GatewayState::default();
        let first = state.apply(1, &cas_put("a", "v", 0, "R"));
        assert_eq!(put_version(&first), Some(1));
        let before = state.snapshot();
        for (index, command) in [
            (2, cas_put("b", "v", 0, "R")),
            (3, cas_put("a", "other", 0, "R")),
            (4, delete("a", "R")),
            (
                5,
                GatewayState::pool_command_with_id(&launch("sb1"), "R", &print("sb1")),
            ),
        ] {
            let reply = state.apply(index, &command);
            assert_eq!(GatewayState::reused(&reply), Ok(Some(1)), "at {index}");
            assert_eq!(GatewayState::replayed(&reply), Ok(None));
            assert!(GatewayState::object_result(&reply).is_err());
            assert_eq!(state.snapshot(), before, "nothing changed at {index}");
        }
        assert!(state.objects.get("t", "b").is_none(), "b never written");
        let retry = state.apply(6, &cas_put("a", "v", 0, "R"));
        assert_eq!(GatewayState::replayed(&retry), Ok(Some(1)));
        assert_eq!(GatewayState::reused(&retry), Ok(None));
        assert_eq!(put_version(&retry), Some(1));
    }

    /// A log written before fingerprints (commands without one) replays to
    /// the same state and snapshot bytes as it did then: a command with a
    /// remembered id replays the first outcome, whatever it asks; and a
    /// fingerprinted command meeting a record without one (a write from
    /// before the upgrade) replays too: a missing fingerprint is unknown,
    /// never a mismatch.
    #[test]
    fn old_entries_without_fingerprints_replay_as_before() {
        let old = |bytes: Vec<u8>| {
            let mut command = LogCommand::decode(bytes.as_slice()).expect("decode");
            command.request_fingerprint.clear();
            command.encode_to_vec()
        };
        let log = [
            old(cas_put("a", "v", 0, "R")),
            old(cas_put("b", "v", 0, "R")),
            old(cas_put("c", "v", 0, "S")),
        ];
        let mut state = GatewayState::default();
        let replies: Vec<Vec<u8>> = log
            .iter()
            .enumerate()
            .map(|(i, c)| state.apply(i as u64 + 1, c))
            .collect();
        // As before fingerprints: b's put replays a's outcome.
        assert_eq!(GatewayState::replayed(&replies[1]), Ok(Some(1)));
        assert!(state.objects.get("t", "b").is_none());
        assert!(state
            .requests
            .to_records()
            .iter()
            .all(|r| r.fingerprint.is_empty()));
        // The snapshot holds no fingerprint: byte-identical to one written
        // before the field existed.
        let bytes = state.snapshot();
        let restored = GatewayState::restore(&bytes).expect("restore");
        assert_eq!(restored.snapshot(), bytes);
        // A new command meets the old record: replayed, not refused.
        let mut state = restored;
        let reply = state.apply(4, &cas_put("d", "v", 0, "S"));
        assert_eq!(GatewayState::replayed(&reply), Ok(Some(3)));
        assert_eq!(GatewayState::reused(&reply), Ok(None));
    }

    #[test]
    fn a_fingerprint_is_bounded_and_needs_a_request_id() {
        let mut command = LogCommand::decode(cas_put("a", "v", 0, "R").as_slice()).expect("decode");
        assert_eq!(command.request_fingerprint.len(), 16);
        command.request_fingerprint = vec![0; 17];
        assert!(GatewayState::validate(&command.encode_to_vec()).is_err());
        let mut command = LogCommand::decode(cas_put("a", "v", 0, "").as_slice()).expect("decode");
        assert!(
            command.request_fingerprint.is_empty(),
            "no id, no fingerprint"
        );
        command.request_fingerprint = vec![0; 16];
        assert!(GatewayState::validate(&command.encode_to_vec()).is_err());
    }

    #[test]
    fn a_malformed_request_id_is_refused_before_proposal() {
        let refused = GatewayState::validate(&cas_put("a", "v", 0, "has space"))
            .expect_err("space")
            .to_string();
        assert!(refused.contains("request_id"), "{refused}");
        assert!(GatewayState::validate(&cas_put("a", "v", 0, &"x".repeat(65))).is_err());
        assert!(GatewayState::validate(&cas_put("a", "v", 0, &"x".repeat(64))).is_ok());
    }
}
