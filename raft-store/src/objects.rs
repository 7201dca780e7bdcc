//! The gateway's generic object store as a deterministic state machine.
//!
//! An object is identified by `(type, id)` and carries name, scope, version,
//! status and payload. Its `resource_version` is the store's revision of the
//! write that last wrote it: [`Objects::revision`] grows by one with every
//! applied put or delete (etcd's revision), deterministically and in the
//! snapshot, so a version names exactly one write even when one raft entry
//! carries many (the log index does not: a batched entry applies all its
//! commands at one index). Writes carry a precondition: unconditional, must-create, or
//! match-resource-version; a failed precondition changes nothing and returns
//! a [`Rejection`] naming the current resource version. Lists are by type and
//! optional scope, keyset-paginated by id.
//!
//! Wire format: commands are `openshell.objects.v1.ObjectCommand`, results
//! `ObjectResult`, the snapshot `ObjectSnapshot` (objects ordered by type, id),
//! all protobuf with fixed field numbers.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message;
pub use proto::objects::{
    object_command, object_result, precondition, DeleteRequest, DeleteResponse, Object,
    ObjectCommand, ObjectResult, ObjectSnapshot, Precondition, PutRequest, RejectReason, Rejection,
};

use crate::error::{InvalidCommand, SnapshotError};
use crate::page_token;
use crate::state_machine::StateMachine;

/// Longest id, type, name, scope, version or status, in bytes.
pub const MAX_FIELD_BYTES: usize = 512;
/// Largest payload, in bytes. Keeps every log entry well below sled's inline
/// value limit (see docs/storage.md).
pub const MAX_PAYLOAD_BYTES: usize = 32 * 1024;
/// Default and largest page of a list.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Largest page of a list.
pub const MAX_PAGE_SIZE: usize = 1000;

/// The object store.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Objects {
    /// (type, id) -> object.
    by_key: BTreeMap<(String, String), Object>,
    /// (type, scope, id): the index lists by scope walk.
    by_scope: BTreeSet<(String, String, String)>,
    /// The revision of the last applied write (0 before any).
    revision: u64,
}

/// A page of a list.
#[derive(Clone, Debug, PartialEq)]
pub struct Page {
    /// Objects in id order.
    pub objects: Vec<Object>,
    /// Token of the next page; `None` after the last.
    pub next_page_token: Option<String>,
}

/// A list request that cannot be served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// The page token was not produced by this store.
    #[error("invalid page token {0:?}: pass the next_page_token of the previous page")]
    BadPageToken(String),
    /// The page size is out of range.
    #[error("page size {0} is out of range 0..={MAX_PAGE_SIZE} (0 means {DEFAULT_PAGE_SIZE})")]
    BadPageSize(u32),
    /// The type is missing.
    #[error("type is required")]
    MissingType,
}

impl Objects {
    /// The object `(object_type, id)`, if present.
    pub fn get(&self, object_type: &str, id: &str) -> Option<&Object> {
        self.by_key.get(&(object_type.to_string(), id.to_string()))
    }

    /// The store revision: how many writes (puts and deletes that took
    /// effect) have been applied.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The revision the next applied write takes.
    fn next_revision(&mut self) -> u64 {
        self.revision += 1;
        self.revision
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Every object, ordered by (type, id).
    pub fn iter(&self) -> impl Iterator<Item = &Object> {
        self.by_key.values()
    }

    /// One page of the objects of `object_type` (and `scope`, unless empty),
    /// after the position named by `page_token`.
    ///
    /// # Errors
    /// [`ListError`] for a missing type, bad page size or foreign token.
    pub fn list(
        &self,
        object_type: &str,
        scope: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<Page, ListError> {
        if object_type.is_empty() {
            return Err(ListError::MissingType);
        }
        let size = match page_size {
            0 => DEFAULT_PAGE_SIZE,
            n if n as usize <= MAX_PAGE_SIZE => n as usize,
            n => return Err(ListError::BadPageSize(n)),
        };
        let after = decode_token(page_token)?;
        let mut objects: Vec<Object> = Vec::with_capacity(size + 1);
        let t = object_type.to_string();
        if scope.is_empty() {
            let start = match &after {
                Some(id) => std::ops::Bound::Excluded((t.clone(), id.clone())),
                None => std::ops::Bound::Included((t.clone(), String::new())),
            };
            for ((ty, _), object) in self.by_key.range((start, std::ops::Bound::Unbounded)) {
                if *ty != t || objects.len() > size {
                    break;
                }
                objects.push(object.clone());
            }
        } else {
            let s = scope.to_string();
            let start = match &after {
                Some(id) => std::ops::Bound::Excluded((t.clone(), s.clone(), id.clone())),
                None => std::ops::Bound::Included((t.clone(), s.clone(), String::new())),
            };
            for (ty, sc, id) in self.by_scope.range((start, std::ops::Bound::Unbounded)) {
                if *ty != t || *sc != s || objects.len() > size {
                    break;
                }
                if let Some(object) = self.by_key.get(&(ty.clone(), id.clone())) {
                    objects.push(object.clone());
                }
            }
        }
        let next_page_token = if objects.len() > size {
            objects.truncate(size);
            objects.last().map(|o| encode_token(&o.id))
        } else {
            None
        };
        Ok(Page {
            objects,
            next_page_token,
        })
    }

    /// Checks a command's shape (not its precondition, which apply decides).
    ///
    /// # Errors
    /// What is malformed, naming the field.
    pub fn validate_command(command: &ObjectCommand) -> Result<(), String> {
        match &command.op {
            None => Err("command has no operation".into()),
            Some(object_command::Op::Put(put)) => {
                let object = put.object.as_ref().ok_or("put has no object")?;
                check_write_key(&object.r#type, &object.id)?;
                for (field, value) in [
                    ("name", &object.name),
                    ("scope", &object.scope),
                    ("version", &object.version),
                    ("status", &object.status),
                ] {
                    if value.len() > MAX_FIELD_BYTES {
                        return Err(format!("{field} is longer than {MAX_FIELD_BYTES} bytes"));
                    }
                }
                if object.payload.len() > MAX_PAYLOAD_BYTES {
                    return Err(format!(
                        "payload is {} bytes; the limit is {MAX_PAYLOAD_BYTES}",
                        object.payload.len()
                    ));
                }
                Ok(())
            }
            Some(object_command::Op::Delete(delete)) => check_write_key(&delete.r#type, &delete.id),
        }
    }

    /// Applies one command at log position `index`.
    pub fn apply_command(&mut self, index: u64, command: &ObjectCommand) -> ObjectResult {
        let result = match &command.op {
            Some(object_command::Op::Put(put)) => self.apply_put(index, put),
            Some(object_command::Op::Delete(delete)) => self.apply_delete(index, delete),
            // validate_command refuses this before proposal.
            None => panic!("object command without operation at log index {index}"),
        };
        ObjectResult {
            result: Some(result),
        }
    }

    /// Checks the precondition against the current object.
    fn check(
        &self,
        precondition: &Option<Precondition>,
        current: Option<&Object>,
    ) -> Result<(), Rejection> {
        let current_rv = current.map(|o| o.resource_version).unwrap_or(0);
        let reject = |reason: RejectReason| {
            Err(Rejection {
                reason: reason as i32,
                current_resource_version: current_rv,
            })
        };
        match precondition.as_ref().and_then(|p| p.kind.as_ref()) {
            None | Some(precondition::Kind::Unconditional(_)) => Ok(()),
            Some(precondition::Kind::MustCreate(_)) if current.is_some() => {
                reject(RejectReason::AlreadyExists)
            }
            Some(precondition::Kind::MustCreate(_)) => Ok(()),
            Some(precondition::Kind::MatchResourceVersion(_)) if current.is_none() => {
                reject(RejectReason::NotFound)
            }
            Some(precondition::Kind::MatchResourceVersion(rv)) if *rv != current_rv => {
                reject(RejectReason::VersionMismatch)
            }
            Some(precondition::Kind::MatchResourceVersion(_)) => Ok(()),
        }
    }

    /// put_if: stores the object at the next revision if the precondition
    /// holds.
    fn apply_put(&mut self, index: u64, put: &PutRequest) -> object_result::Result {
        let Some(object) = &put.object else {
            panic!("put without object at log index {index}")
        };
        let key = (object.r#type.clone(), object.id.clone());
        let current = self.by_key.get(&key);
        if let Err(rejection) = self.check(&put.precondition, current) {
            return object_result::Result::Rejected(rejection);
        }
        // The scope index holds (type, scope, id); type and id are the
        // key's, so an overwrite within the same scope leaves it as it is
        // (re-indexing cost two tree searches of string compares per put:
        // 4 % of a gateway's CPU under the 64-client bench).
        let rescoped = current.is_none_or(|old| old.scope != object.scope);
        if let Some(old) = current.filter(|_| rescoped) {
            self.by_scope
                .remove(&(old.r#type.clone(), old.scope.clone(), old.id.clone()));
        }
        let mut stored = object.clone();
        stored.resource_version = self.write_version(index);
        if rescoped {
            self.by_scope.insert((
                stored.r#type.clone(),
                stored.scope.clone(),
                stored.id.clone(),
            ));
        }
        self.by_key.insert(key, stored.clone());
        object_result::Result::Put(stored)
    }

    /// delete_if: removes the object if the precondition holds. Deleting an
    /// absent object unconditionally is rejected as not found.
    fn apply_delete(&mut self, index: u64, delete: &DeleteRequest) -> object_result::Result {
        let key = (delete.r#type.clone(), delete.id.clone());
        let current = self.by_key.get(&key);
        if let Err(rejection) = self.check(&delete.precondition, current) {
            return object_result::Result::Rejected(rejection);
        }
        match self.by_key.remove(&key) {
            Some(old) => {
                self.by_scope
                    .remove(&(old.r#type.clone(), old.scope.clone(), old.id.clone()));
                object_result::Result::Deleted(DeleteResponse {
                    deleted_resource_version: old.resource_version,
                    log_index: index,
                    revision: self.write_version(index),
                    replayed: false,
                })
            }
            None => object_result::Result::Rejected(Rejection {
                reason: RejectReason::NotFound as i32,
                current_resource_version: 0,
            }),
        }
    }

    /// The version an applied write at log `index` takes: the next
    /// revision. (With the shared-resource-version fault on (`crate::fault`), the
    /// earlier, wrong rule: the log index, shared by every write of a batched
    /// entry; only for proving the Jepsen version-CAS checker catches it.)
    fn write_version(&mut self, index: u64) -> u64 {
        let revision = self.next_revision();
        if crate::fault::shared_resource_version() {
            index
        } else {
            revision
        }
    }

    /// The snapshot record.
    pub fn to_snapshot(&self) -> ObjectSnapshot {
        ObjectSnapshot {
            objects: self.by_key.values().cloned().collect(),
            revision: self.revision,
        }
    }

    /// Rebuilds the store from its snapshot record.
    ///
    /// # Errors
    /// When the record holds an invalid or duplicate key.
    pub fn from_snapshot(snapshot: ObjectSnapshot) -> Result<Self, SnapshotError> {
        let mut objects = Objects {
            revision: snapshot.revision,
            ..Objects::default()
        };
        for object in snapshot.objects {
            // A snapshot from before revisions existed (revision 0) carries
            // log indexes as versions: continue above the highest, so no
            // version is ever given twice.
            objects.revision = objects.revision.max(object.resource_version);
            check_key(&object.r#type, &object.id).map_err(SnapshotError::new)?;
            objects.by_scope.insert((
                object.r#type.clone(),
                object.scope.clone(),
                object.id.clone(),
            ));
            let key = (object.r#type.clone(), object.id.clone());
            if objects.by_key.insert(key.clone(), object).is_some() {
                return Err(SnapshotError::new(format!(
                    "snapshot holds object {key:?} twice"
                )));
            }
        }
        Ok(objects)
    }
}

/// The shape a stored key must have: non-empty and at most
/// [`MAX_FIELD_BYTES`]. `from_snapshot` holds a restored state to this
/// only: a snapshot an older version wrote may hold keys outside the
/// identifier rule, and must restore to the same state everywhere.
fn check_key(object_type: &str, id: &str) -> Result<(), String> {
    if object_type.is_empty() {
        return Err("type is required".into());
    }
    if id.is_empty() {
        return Err("id is required".into());
    }
    if object_type.len() > MAX_FIELD_BYTES || id.len() > MAX_FIELD_BYTES {
        return Err(format!(
            "type and id must be at most {MAX_FIELD_BYTES} bytes"
        ));
    }
    Ok(())
}

/// The rule a new write's key must follow: `type` and `id` are identifiers
/// ([`proto::ids`]: 1 to 128 characters of `[A-Za-z0-9._-]`, not starting
/// with `.` or `-`). Checked before proposing ([`Objects::validate_command`]),
/// never in apply, so a log an older version wrote replays unchanged.
///
/// # Errors
/// The field and the part of the rule it broke (`invalid type: ...`).
pub fn check_write_key(object_type: &str, id: &str) -> Result<(), String> {
    proto::ids::check_id("type", object_type).map_err(|e| e.to_string())?;
    proto::ids::check_id("id", id).map_err(|e| e.to_string())
}

fn encode_token(id: &str) -> String {
    page_token::encode(id)
}

fn decode_token(token: &str) -> Result<Option<String>, ListError> {
    page_token::decode(token).map_err(|_| ListError::BadPageToken(token.to_string()))
}

/// The object store on its own is a raft-store state machine (the gateway
/// composes it with the pool instead).
impl StateMachine for Objects {
    fn validate(command: &[u8]) -> Result<(), InvalidCommand> {
        let command = ObjectCommand::decode(command)
            .map_err(|e| InvalidCommand::new(format!("not an ObjectCommand: {e}")))?;
        Objects::validate_command(&command).map_err(InvalidCommand::new)
    }

    fn apply(&mut self, index: u64, command: &[u8]) -> Vec<u8> {
        let command = match ObjectCommand::decode(command) {
            Ok(c) => c,
            Err(e) => panic!("undecodable object command at log index {index}: {e}"),
        };
        self.apply_command(index, &command).encode_to_vec()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.to_snapshot().encode_to_vec()
    }

    fn restore(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let snapshot = ObjectSnapshot::decode(bytes)
            .map_err(|e| SnapshotError::new(format!("not an ObjectSnapshot: {e}")))?;
        Objects::from_snapshot(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(id: &str, scope: &str, pre: Option<precondition::Kind>) -> ObjectCommand {
        ObjectCommand {
            op: Some(object_command::Op::Put(PutRequest {
                object: Some(Object {
                    id: id.into(),
                    r#type: "sandbox".into(),
                    scope: scope.into(),
                    payload: id.as_bytes().to_vec(),
                    ..Default::default()
                }),
                precondition: pre.map(|k| Precondition { kind: Some(k) }),
                request_id: String::new(),
            })),
        }
    }

    fn delete(id: &str, pre: Option<precondition::Kind>) -> ObjectCommand {
        ObjectCommand {
            op: Some(object_command::Op::Delete(DeleteRequest {
                r#type: "sandbox".into(),
                id: id.into(),
                precondition: pre.map(|k| Precondition { kind: Some(k) }),
                request_id: String::new(),
            })),
        }
    }

    fn rejected(result: &ObjectResult) -> Option<RejectReason> {
        match &result.result {
            Some(object_result::Result::Rejected(r)) => RejectReason::try_from(r.reason).ok(),
            _ => None,
        }
    }

    #[test]
    fn resource_version_is_the_store_revision_of_the_write() {
        let mut s = Objects::default();
        s.apply_command(7, &put("a", "x", None));
        assert_eq!(s.get("sandbox", "a").map(|o| o.resource_version), Some(1));
        s.apply_command(9, &put("a", "x", None));
        assert_eq!(s.get("sandbox", "a").map(|o| o.resource_version), Some(2));
        assert_eq!(s.revision(), 2);
    }

    /// Writes batched into one raft entry apply at one log index, yet each
    /// gets a version of its own: a CAS on one write's version never
    /// overwrites another write.
    #[test]
    fn writes_of_one_entry_get_distinct_versions() {
        let mut s = Objects::default();
        let first = s.apply_command(10, &put("a", "x", None));
        let second = s.apply_command(10, &put("a", "x", None));
        let version = |r: &ObjectResult| match &r.result {
            Some(object_result::Result::Put(o)) => o.resource_version,
            other => panic!("not a put: {other:?}"),
        };
        assert_eq!((version(&first), version(&second)), (1, 2));
        // The first writer's CAS on its own version must now fail.
        let stale = s.apply_command(
            11,
            &put("a", "x", Some(precondition::Kind::MatchResourceVersion(1))),
        );
        assert_eq!(rejected(&stale), Some(RejectReason::VersionMismatch));
        let deleted = s.apply_command(12, &delete("a", None));
        assert!(matches!(
            deleted.result,
            Some(object_result::Result::Deleted(DeleteResponse {
                deleted_resource_version: 2,
                log_index: 12,
                revision: 3,
                replayed: false,
            }))
        ));
    }

    /// The revision survives a snapshot, and a snapshot from before
    /// revisions existed continues above its highest version.
    #[test]
    fn revision_survives_snapshots_old_and_new() {
        let mut s = Objects::default();
        s.apply_command(3, &put("a", "x", None));
        s.apply_command(3, &put("b", "x", None));
        s.apply_command(4, &delete("b", None));
        let restored = Objects::from_snapshot(s.to_snapshot()).expect("restore");
        assert_eq!(restored.revision(), 3);
        assert_eq!(restored, s);

        let mut old = s.to_snapshot();
        old.revision = 0;
        old.objects[0].resource_version = 40;
        let mut restored = Objects::from_snapshot(old).expect("restore old");
        assert_eq!(restored.revision(), 40);
        restored.apply_command(50, &put("c", "x", None));
        assert_eq!(
            restored.get("sandbox", "c").map(|o| o.resource_version),
            Some(41)
        );
    }

    #[test]
    fn preconditions_reject_without_change() {
        let mut s = Objects::default();
        s.apply_command(
            1,
            &put("a", "x", Some(precondition::Kind::MustCreate(true))),
        );
        let before = s.snapshot();
        let r = s.apply_command(
            2,
            &put("a", "x", Some(precondition::Kind::MustCreate(true))),
        );
        assert_eq!(rejected(&r), Some(RejectReason::AlreadyExists));
        let r = s.apply_command(
            3,
            &put("a", "x", Some(precondition::Kind::MatchResourceVersion(2))),
        );
        assert_eq!(rejected(&r), Some(RejectReason::VersionMismatch));
        let r = s.apply_command(
            4,
            &put("b", "x", Some(precondition::Kind::MatchResourceVersion(1))),
        );
        assert_eq!(rejected(&r), Some(RejectReason::NotFound));
        assert_eq!(s.snapshot(), before);
        let r = s.apply_command(
            5,
            &put("a", "x", Some(precondition::Kind::MatchResourceVersion(1))),
        );
        assert_eq!(rejected(&r), None);
        assert_eq!(s.get("sandbox", "a").map(|o| o.resource_version), Some(2));
    }

    #[test]
    fn delete_if_matches_resource_version() {
        let mut s = Objects::default();
        s.apply_command(1, &put("a", "x", None));
        let delete = |rv| ObjectCommand {
            op: Some(object_command::Op::Delete(DeleteRequest {
                r#type: "sandbox".into(),
                id: "a".into(),
                precondition: Some(Precondition {
                    kind: Some(precondition::Kind::MatchResourceVersion(rv)),
                }),
                request_id: String::new(),
            })),
        };
        assert_eq!(
            rejected(&s.apply_command(2, &delete(5))),
            Some(RejectReason::VersionMismatch)
        );
        assert!(s.get("sandbox", "a").is_some());
        assert_eq!(rejected(&s.apply_command(3, &delete(1))), None);
        assert!(s.get("sandbox", "a").is_none());
    }

    #[test]
    fn list_is_keyset_paginated_by_type_and_scope() {
        let mut s = Objects::default();
        for (i, id) in ["e", "a", "d", "b", "c"].iter().enumerate() {
            s.apply_command(
                i as u64 + 1,
                &put(id, if *id == "d" { "y" } else { "x" }, None),
            );
        }
        let p1 = s
            .list("sandbox", "x", 2, "")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p1.objects.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let token = p1.next_page_token.unwrap_or_default();
        let p2 = s
            .list("sandbox", "x", 2, &token)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p2.objects.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(),
            ["c", "e"]
        );
        assert_eq!(p2.next_page_token, None);
        let all = s
            .list("sandbox", "", 10, "")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(all.objects.len(), 5);
        assert_eq!(
            s.list("sandbox", "", 10, "garbage"),
            Err(ListError::BadPageToken("garbage".into()))
        );
        assert_eq!(
            s.list("sandbox", "", 5000, ""),
            Err(ListError::BadPageSize(5000))
        );
        // Moving an object to another scope moves it in the scope index.
        s.apply_command(9, &put("a", "y", None));
        let y = s
            .list("sandbox", "y", 10, "")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            y.objects.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(),
            ["a", "d"]
        );
        // Overwriting in the same scope keeps it listed, once.
        s.apply_command(10, &put("b", "x", None));
        let x = s
            .list("sandbox", "x", 10, "")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            x.objects.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(),
            ["b", "c", "e"]
        );
    }

    #[test]
    fn snapshot_round_trips_byte_identical() {
        let mut s = Objects::default();
        for i in 0..50u64 {
            s.apply_command(
                i + 1,
                &put(&format!("o{}", (i * 7) % 23), &format!("s{}", i % 3), None),
            );
        }
        let bytes = s.snapshot();
        let restored = <Objects as StateMachine>::restore(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(restored, s);
        assert_eq!(restored.snapshot(), bytes);
        assert!(<Objects as StateMachine>::restore(b"\xff\xff garbage").is_err());
    }

    #[test]
    fn validate_refuses_malformed_commands() {
        assert!(<Objects as StateMachine>::validate(b"\xff\xff").is_err());
        assert!(Objects::validate_command(&ObjectCommand { op: None }).is_err());
        assert!(Objects::validate_command(&put("", "x", None)).is_err());
        for bad in ["../x", "x/../../y", ".", "a b", &"x".repeat(300)] {
            let refused = Objects::validate_command(&put(bad, "x", None)).unwrap_err();
            assert!(refused.starts_with("invalid id"), "{bad}: {refused}");
            assert!(
                Objects::validate_command(&delete(bad, None)).is_err(),
                "{bad}"
            );
        }
        let mut big = put("a", "x", None);
        if let Some(object_command::Op::Put(p)) = &mut big.op {
            if let Some(o) = &mut p.object {
                o.payload = vec![0; MAX_PAYLOAD_BYTES + 1];
            }
        }
        assert!(Objects::validate_command(&big)
            .unwrap_err()
            .contains("payload"));
    }
}
