//! The object store's recent writes as watch events: a bounded journal a
//! replica keeps next to its [`crate::objects::Objects`], fed by apply,
//! read by `ObjectStore.Watch`.
//!
//! Not replicated state: not in the snapshot, never read by apply, so apply
//! stays deterministic whatever it holds. It holds the events of the most
//! recent revisions a replica applied itself, at most [`MAX_EVENTS`] and
//! [`MAX_BYTES`] of objects; after a restore from a snapshot at revision
//! `R` it starts empty and serves from `R + 1` on. A watcher asking for an
//! older revision is told the oldest one held ([`Compacted`]), as etcd
//! answers a compacted revision.

use std::collections::VecDeque;
use std::sync::Arc;

use prost::Message;
use proto::objects::{
    object_command, object_result, Object, ObjectCommand, ObjectResult, WatchEvent, WatchEventKind,
};

/// Events a journal holds at most.
pub const MAX_EVENTS: usize = 10_000;
/// Encoded bytes of the events a journal holds, at most.
pub const MAX_BYTES: usize = 16 * 1024 * 1024;

/// The revision a watcher asked for is no longer held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("revision {asked} is compacted on this gateway: the oldest revision it holds is {oldest}")]
pub struct Compacted {
    /// The revision asked for.
    pub asked: u64,
    /// The oldest revision whose events are all still held.
    pub oldest: u64,
}

/// Which objects a watch covers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchKey {
    /// The type; empty: every type.
    pub object_type: String,
    /// Exactly this id; empty: every id starting with `id_prefix`.
    pub id: String,
    /// The id prefix (when `id` is empty).
    pub id_prefix: String,
}

impl WatchKey {
    /// Whether `object` is covered.
    pub fn covers(&self, object: &Object) -> bool {
        if self.object_type.is_empty() {
            return true;
        }
        if object.r#type != self.object_type {
            return false;
        }
        if self.id.is_empty() {
            object.id.starts_with(&self.id_prefix)
        } else {
            object.id == self.id
        }
    }
}

/// What [`ObjectEvents::since`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// Covered events from the asked revision on, in revision order.
    pub events: Vec<Arc<WatchEvent>>,
    /// Every covered event up to this revision is in `events` (or was
    /// before the asked revision): the store revision read, or the last
    /// event looked at when `limit` cut the search short.
    pub through: u64,
}

/// The journal of one replica.
#[derive(Clone, Debug, Default)]
pub struct ObjectEvents {
    /// Events in revision order (shared by clones of the state).
    events: VecDeque<Arc<WatchEvent>>,
    /// Encoded bytes of `events`.
    bytes: usize,
    /// Every event from this revision on is held (or not written yet).
    oldest: u64,
    /// The store revision of the last write recorded (or the state's
    /// revision at the journal's start).
    revision: u64,
}

impl ObjectEvents {
    /// An empty journal of a state at store revision `revision` (0: a
    /// fresh store; a snapshot's otherwise).
    pub fn starting_at(revision: u64) -> Self {
        ObjectEvents {
            events: VecDeque::new(),
            bytes: 0,
            oldest: revision + 1,
            revision,
        }
    }

    /// The oldest revision whose events are all held.
    pub fn oldest(&self) -> u64 {
        self.oldest.max(1)
    }

    /// Records what applying `command` did (`result`); a rejected write
    /// changed nothing and records nothing.
    pub fn record(&mut self, command: &ObjectCommand, result: &ObjectResult) {
        let event = match (&command.op, &result.result) {
            (_, Some(object_result::Result::Put(stored))) => WatchEvent {
                kind: WatchEventKind::Put as i32,
                revision: stored.resource_version,
                object: Some(stored.clone()),
            },
            (
                Some(object_command::Op::Delete(delete)),
                Some(object_result::Result::Deleted(deleted)),
            ) => WatchEvent {
                kind: WatchEventKind::Delete as i32,
                revision: deleted.revision,
                object: Some(Object {
                    r#type: delete.r#type.clone(),
                    id: delete.id.clone(),
                    resource_version: deleted.deleted_resource_version,
                    ..Object::default()
                }),
            },
            _ => return,
        };
        self.push(event);
    }

    fn push(&mut self, event: WatchEvent) {
        self.revision = self.revision.max(event.revision);
        self.bytes += event.encoded_len();
        self.events.push_back(Arc::new(event));
        while self.events.len() > MAX_EVENTS || self.bytes > MAX_BYTES {
            let Some(old) = self.events.pop_front() else {
                break;
            };
            self.bytes -= old.encoded_len();
            self.oldest = old.revision + 1;
        }
    }

    /// The events `key` covers from revision `from` on, given the state's
    /// store revision `revision`: at most `limit` of them, and none past
    /// the first that brings their encoded size over `bytes`.
    ///
    /// # Errors
    /// [`Compacted`] when `from` is older than the journal holds.
    pub fn since(
        &self,
        key: &WatchKey,
        from: u64,
        revision: u64,
        limit: usize,
        bytes: usize,
    ) -> Result<Found, Compacted> {
        let from = from.max(1);
        if from < self.oldest() {
            return Err(Compacted {
                asked: from,
                oldest: self.oldest(),
            });
        }
        let start = self.events.partition_point(|e| e.revision < from);
        let mut events = Vec::new();
        let mut size = 0;
        for event in self.events.iter().skip(start) {
            if events.len() == limit || size > bytes {
                // `event` is not sent: everything before it was looked at.
                return Ok(Found {
                    through: event.revision - 1,
                    events,
                });
            }
            if event.object.as_ref().is_some_and(|o| key.covers(o)) {
                size += event.encoded_len();
                events.push(Arc::clone(event));
            }
        }
        Ok(Found {
            events,
            through: revision,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::Objects;
    use proto::objects::{DeleteRequest, PutRequest};

    fn put(id: &str, payload: usize) -> ObjectCommand {
        ObjectCommand {
            op: Some(object_command::Op::Put(PutRequest {
                object: Some(Object {
                    r#type: "sandbox".into(),
                    id: id.into(),
                    payload: vec![7; payload],
                    ..Object::default()
                }),
                ..PutRequest::default()
            })),
        }
    }

    fn delete(id: &str) -> ObjectCommand {
        ObjectCommand {
            op: Some(object_command::Op::Delete(DeleteRequest {
                r#type: "sandbox".into(),
                id: id.into(),
                ..DeleteRequest::default()
            })),
        }
    }

    fn apply(objects: &mut Objects, journal: &mut ObjectEvents, command: &ObjectCommand) {
        let result = objects.apply_command(1, command);
        journal.record(command, &result);
    }

    fn key(id_prefix: &str) -> WatchKey {
        WatchKey {
            object_type: "sandbox".into(),
            id_prefix: id_prefix.into(),
            ..WatchKey::default()
        }
    }

    #[test]
    fn events_follow_revisions_and_skip_rejected_writes() {
        let (mut objects, mut journal) = (Objects::default(), ObjectEvents::default());
        apply(&mut objects, &mut journal, &put("a1", 1));
        apply(&mut objects, &mut journal, &delete("zz")); // rejected: absent
        apply(&mut objects, &mut journal, &put("b1", 1));
        apply(&mut objects, &mut journal, &delete("a1"));
        let found = journal
            .since(&key("a"), 0, objects.revision(), 100, MAX_BYTES)
            .expect("held");
        let seen: Vec<(i32, u64, &str)> = found
            .events
            .iter()
            .map(|e| {
                (
                    e.kind,
                    e.revision,
                    e.object.as_ref().map_or("", |o| o.id.as_str()),
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (WatchEventKind::Put as i32, 1, "a1"),
                (WatchEventKind::Delete as i32, 3, "a1")
            ]
        );
        assert_eq!(found.through, 3);
        let later = journal.since(&key(""), 3, 3, 100, MAX_BYTES).expect("held");
        assert_eq!(later.events.len(), 1);
    }

    #[test]
    fn a_limit_reports_how_far_it_looked() {
        let (mut objects, mut journal) = (Objects::default(), ObjectEvents::default());
        for i in 0..5 {
            apply(&mut objects, &mut journal, &put(&format!("s{i}"), 1));
        }
        let found = journal.since(&key(""), 2, 5, 2, MAX_BYTES).expect("held");
        assert_eq!(found.events.len(), 2);
        assert_eq!(found.through, 3);
    }

    #[test]
    fn old_revisions_are_compacted_by_count_and_by_bytes() {
        let (mut objects, mut journal) = (Objects::default(), ObjectEvents::default());
        for i in 0..(MAX_EVENTS + 5) {
            apply(&mut objects, &mut journal, &put(&format!("s{}", i % 3), 1));
        }
        assert_eq!(journal.oldest(), 6);
        assert_eq!(
            journal
                .since(&key(""), 5, objects.revision(), 1, MAX_BYTES)
                .err(),
            Some(Compacted {
                asked: 5,
                oldest: 6
            })
        );
        assert!(journal
            .since(&key(""), 6, objects.revision(), 1, MAX_BYTES)
            .is_ok());
        for _ in 0..(MAX_BYTES / 30_000 + 2) {
            apply(&mut objects, &mut journal, &put("big", 30_000));
        }
        assert!(journal.bytes <= MAX_BYTES);
        assert!(journal.events.len() < MAX_EVENTS);
    }

    #[test]
    fn a_journal_from_a_snapshot_serves_only_what_follows_it() {
        let journal = ObjectEvents::starting_at(40);
        assert_eq!(
            journal.since(&key(""), 40, 40, 1, MAX_BYTES).err(),
            Some(Compacted {
                asked: 40,
                oldest: 41
            })
        );
        let found = journal.since(&key(""), 41, 40, 1, MAX_BYTES).expect("held");
        assert!(found.events.is_empty());
        assert_eq!(found.through, 40);
    }
}
