//! The request-id table: the outcome of every recent write that carried a
//! client request id, so a retried write is answered with its first outcome
//! instead of applying twice.
//!
//! Part of the replicated state ([`crate::state::GatewayState`]) and of its
//! snapshot, so it must be as deterministic as apply itself: a `BTreeMap`
//! from id to record and a `VecDeque` of ids in apply order; no clock, no
//! randomness, no hash-map order. The table holds at most
//! [`REQUEST_TABLE_CAPACITY`] ids and forgets the oldest first (FIFO by
//! apply order): a retry that comes after a hundred thousand other
//! identified writes applies again, as a write without an id would.
//!
//! Ids are scoped by the id alone. The gateway's bearer tokens name a role
//! (viewer, platform_admin), not a caller, so there is no caller identity to
//! scope by; a client chooses 128 random bits (the `openshell-client` crate
//! does), which no two writers share.
//!
//! Each outcome is kept with the [`fingerprint`] of the request that
//! produced it, so that an id reused for a *different* write is told from
//! a retry: the retry (same fingerprint) replays, the other write is
//! refused (`RequestIdReused`, [`crate::state`]) and changes nothing, never
//! acknowledged as if it had been written (issue 32). A record written
//! before fingerprints existed has none: its id matches any command, as it
//! did then (those records leave the table within its window).

use std::collections::{BTreeMap, VecDeque};

use proto::gateway::{LogResult, RequestRecord};
use raft_store::SnapshotError;
use sha2::Digest;

/// How many request ids the table remembers. Part of apply's semantics:
/// every replica of one cluster must use the same value (changing it is a
/// change of the replicated state machine, like any change of apply).
pub const REQUEST_TABLE_CAPACITY: usize = 100_000;

/// Longest request id, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 64;

/// Checks a request id from a client: empty (no deduplication), or 1 to
/// [`MAX_REQUEST_ID_BYTES`] bytes of printable ASCII without spaces.
///
/// # Errors
/// What is wrong, naming the field `request_id`.
pub fn check_request_id(id: &str) -> Result<(), String> {
    if id.len() > MAX_REQUEST_ID_BYTES {
        return Err(format!(
            "request_id is {} bytes; at most {MAX_REQUEST_ID_BYTES}",
            id.len()
        ));
    }
    if let Some(c) = id.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!(
            "request_id holds {c:?}: only printable ASCII without spaces (0x21..=0x7E)"
        ));
    }
    Ok(())
}

/// Length of a request [`fingerprint`], in bytes.
pub const FINGERPRINT_BYTES: usize = 16;

/// The fingerprint of a client request: the first [`FINGERPRINT_BYTES`]
/// bytes of the SHA-256 of `rpc` (the call: `objects.Put`,
/// `pool_admin.CreateSandbox`, ...), a zero byte, and `request`, the
/// request's protobuf encoding **with its `request_id` cleared**. The RPC
/// is part of it because two requests of different calls may encode alike
/// (a `CreateSandboxRequest` and a `DeleteSandboxRequest` naming only a
/// sandbox id). Computed where the command is made, from what the client
/// sent, so that a retry (the same request again) has the same one even
/// when the command made from it differs (a sandbox the gateway names).
/// 128 bits: only the owner of an id (who chose it at random) could try to
/// make two of its own writes collide, and gains nothing by it.
pub fn fingerprint(rpc: &str, request: &[u8]) -> Vec<u8> {
    let mut hash = sha2::Sha256::new();
    hash.update(rpc.as_bytes());
    hash.update([0u8]);
    hash.update(request);
    hash.finalize()[..FINGERPRINT_BYTES].to_vec()
}

/// An identifier derived from a client request id: `PREFIX-r` and 16 hex
/// digits of its SHA-256, so every retry of one request names the same
/// record (an operation started without an id) and the result passes the
/// identifier rule whatever the request id holds.
pub fn derived_id(prefix: &str, request_id: &str) -> String {
    let digest = sha2::Sha256::digest(request_id.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}-r{hex}")
}

/// The [`fingerprint`] of `request`, a request of `rpc`, once `clear_id`
/// has emptied its `request_id` (on a copy).
pub fn fingerprint_of<M: prost::Message + Clone>(
    rpc: &str,
    request: &M,
    clear_id: impl FnOnce(&mut M),
) -> Vec<u8> {
    let mut request = request.clone();
    clear_id(&mut request);
    fingerprint(rpc, &request.encode_to_vec())
}

/// Checks a fingerprint from a log command or a snapshot record: empty
/// (none: written before fingerprints existed) or [`FINGERPRINT_BYTES`].
///
/// # Errors
/// Its length, in words.
pub fn check_fingerprint(fingerprint: &[u8]) -> Result<(), String> {
    if fingerprint.is_empty() || fingerprint.len() == FINGERPRINT_BYTES {
        return Ok(());
    }
    Err(format!(
        "request fingerprint is {} bytes; it must be empty or {FINGERPRINT_BYTES}",
        fingerprint.len()
    ))
}

/// One remembered write.
#[derive(Clone, Debug, PartialEq)]
pub struct Remembered {
    /// The log index that applied it.
    pub log_index: u64,
    /// Its outcome (see [`crate::state`] for what is kept of a put).
    pub result: LogResult,
    /// The [`fingerprint`] of its request; empty for a write proposed
    /// before fingerprints existed.
    pub fingerprint: Vec<u8>,
}

impl Remembered {
    /// Whether a command with `fingerprint` and this record's id is another
    /// write than the one remembered. Only two fingerprints can say so: a
    /// missing one (an old record, or a command from an older gateway)
    /// matches, as every command with the id did before fingerprints.
    pub fn is_other_write(&self, fingerprint: &[u8]) -> bool {
        !self.fingerprint.is_empty() && !fingerprint.is_empty() && self.fingerprint != fingerprint
    }
}

/// The remembered outcomes, oldest first.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestTable {
    /// Request id -> what its write did.
    by_id: BTreeMap<String, Remembered>,
    /// Ids in apply order: the front is evicted first.
    order: VecDeque<String>,
    /// At most this many ids.
    capacity: usize,
}

impl Default for RequestTable {
    fn default() -> Self {
        RequestTable::with_capacity(REQUEST_TABLE_CAPACITY)
    }
}

impl RequestTable {
    /// An empty table remembering at most `capacity` ids (the gateway uses
    /// [`REQUEST_TABLE_CAPACITY`]; tests use small ones).
    pub fn with_capacity(capacity: usize) -> Self {
        RequestTable {
            by_id: BTreeMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// What `id`'s write did, if remembered.
    pub fn get(&self, id: &str) -> Option<&Remembered> {
        self.by_id.get(id)
    }

    /// How many ids are remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no id is remembered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Remembers `write` under `id`, forgetting the oldest ids beyond the
    /// capacity. An id already remembered keeps its first write (apply
    /// never records one twice: it replays or refuses instead).
    pub fn record(&mut self, id: &str, write: Remembered) {
        if self.by_id.contains_key(id) {
            return;
        }
        self.by_id.insert(id.to_string(), write);
        self.order.push_back(id.to_string());
        self.evict();
    }

    fn evict(&mut self) {
        while self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.by_id.remove(&oldest);
            }
        }
    }

    /// The snapshot records, oldest first.
    pub fn to_records(&self) -> Vec<RequestRecord> {
        self.order
            .iter()
            .filter_map(|id| {
                self.by_id.get(id).map(|write| RequestRecord {
                    request_id: id.clone(),
                    log_index: write.log_index,
                    result: Some(write.result.clone()),
                    fingerprint: write.fingerprint.clone(),
                })
            })
            .collect()
    }

    /// Rebuilds the table from snapshot records (oldest first), keeping the
    /// newest `capacity` of them.
    ///
    /// # Errors
    /// A record without an id or an outcome, an id twice, or a fingerprint
    /// of another length than [`FINGERPRINT_BYTES`] (none is fine: a
    /// record written before fingerprints existed).
    pub fn from_records(
        records: Vec<RequestRecord>,
        capacity: usize,
    ) -> Result<Self, SnapshotError> {
        let mut table = RequestTable::with_capacity(capacity);
        for record in records {
            let Some(result) = record.result else {
                return Err(SnapshotError::new(format!(
                    "request record {:?} has no outcome",
                    record.request_id
                )));
            };
            if record.request_id.is_empty() || table.by_id.contains_key(&record.request_id) {
                return Err(SnapshotError::new(format!(
                    "request record {:?} is empty or repeated",
                    record.request_id
                )));
            }
            check_fingerprint(&record.fingerprint).map_err(|e| {
                SnapshotError::new(format!("request record {:?}: {e}", record.request_id))
            })?;
            table.record(
                &record.request_id,
                Remembered {
                    log_index: record.log_index,
                    result,
                    fingerprint: record.fingerprint,
                },
            );
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::gateway::log_result;

    fn outcome(n: u8) -> LogResult {
        LogResult {
            result: Some(log_result::Result::Pool(vec![n])),
            ..LogResult::default()
        }
    }

    fn write(log_index: u64, n: u8) -> Remembered {
        Remembered {
            log_index,
            result: outcome(n),
            fingerprint: fingerprint("test", &[n]),
        }
    }

    #[test]
    fn a_request_id_is_printable_ascii_of_at_most_64_bytes() {
        assert!(check_request_id("").is_ok());
        assert!(check_request_id(&"a".repeat(64)).is_ok());
        assert!(check_request_id("0f3c-9a:x/y").is_ok());
        for bad in ["a b", "tab\t", "é", "\u{7f}"] {
            let refused = check_request_id(bad).unwrap_err();
            assert!(refused.starts_with("request_id"), "{bad:?}: {refused}");
        }
        assert!(check_request_id(&"a".repeat(65))
            .unwrap_err()
            .starts_with("request_id"));
    }

    #[test]
    fn the_oldest_id_is_forgotten_first_once_the_table_is_full() {
        let mut table = RequestTable::with_capacity(3);
        for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
            table.record(id, write(i as u64 + 1, i as u8));
        }
        assert_eq!(table.len(), 3);
        assert!(table.get("a").is_none(), "a is the oldest");
        assert_eq!(table.get("b").map(|r| r.log_index), Some(2));
        // Recording a remembered id keeps its first outcome and its place.
        table.record("b", write(9, 9));
        assert_eq!(table.get("b"), Some(&write(2, 1)));
        table.record("e", write(5, 5));
        assert!(table.get("b").is_none(), "b is now the oldest");
    }

    #[test]
    fn the_table_round_trips_through_its_records_in_apply_order() {
        let mut table = RequestTable::with_capacity(10);
        for (i, id) in ["z", "a", "m"].iter().enumerate() {
            table.record(id, write(i as u64 + 1, i as u8));
        }
        let records = table.to_records();
        assert_eq!(
            records
                .iter()
                .map(|r| r.request_id.as_str())
                .collect::<Vec<_>>(),
            ["z", "a", "m"]
        );
        let restored = RequestTable::from_records(records.clone(), 10).expect("restore");
        assert_eq!(restored, table);
        // A smaller capacity keeps the newest.
        let smaller = RequestTable::from_records(records.clone(), 2).expect("restore");
        assert!(smaller.get("z").is_none() && smaller.get("m").is_some());
        let mut twice = records.clone();
        twice.push(twice[0].clone());
        assert!(RequestTable::from_records(twice, 10).is_err());
        let mut bad = records;
        bad[1].fingerprint = vec![1; 5];
        let e = RequestTable::from_records(bad, 10).unwrap_err().to_string();
        assert!(e.contains("fingerprint") && e.contains("\"a\""), "{e}");
    }

    #[test]
    fn fingerprints_tell_the_call_and_the_request_apart() {
        let a = fingerprint("objects.Put", b"x");
        assert_eq!(a.len(), FINGERPRINT_BYTES);
        assert_eq!(a, fingerprint("objects.Put", b"x"), "deterministic");
        assert_ne!(a, fingerprint("objects.Put", b"y"));
        assert_ne!(a, fingerprint("objects.Delete", b"x"));
        // The separator keeps (rpc, request) pairs apart.
        assert_ne!(fingerprint("ab", b"c"), fingerprint("a", b"bc"));
    }

    #[test]
    fn only_two_known_fingerprints_that_differ_make_another_write() {
        let known = write(1, 1);
        assert!(!known.is_other_write(&known.fingerprint), "a retry");
        assert!(known.is_other_write(&fingerprint("test", &[2])));
        assert!(
            !known.is_other_write(&[]),
            "a command from an older gateway"
        );
        let old = Remembered {
            fingerprint: Vec::new(),
            ..known
        };
        assert!(
            !old.is_other_write(&fingerprint("test", &[2])),
            "an old record"
        );
        assert!(check_fingerprint(&[]).is_ok());
        assert!(check_fingerprint(&[0; FINGERPRINT_BYTES]).is_ok());
        assert!(check_fingerprint(&[0; 32]).is_err());
    }

    /// A snapshot's request record from before fingerprints (no field 4)
    /// loads as a record without one, and encodes back to the same bytes.
    #[test]
    fn an_old_record_without_a_fingerprint_loads_and_encodes_unchanged() {
        use prost::Message;
        let old = RequestRecord {
            request_id: "req-old".into(),
            log_index: 7,
            result: Some(outcome(3)),
            fingerprint: Vec::new(),
        };
        let bytes = old.encode_to_vec();
        let table = RequestTable::from_records(
            vec![RequestRecord::decode(bytes.as_slice()).expect("decode")],
            10,
        )
        .expect("old record");
        assert_eq!(
            table.get("req-old").map(|r| r.fingerprint.is_empty()),
            Some(true)
        );
        assert_eq!(table.to_records()[0].encode_to_vec(), bytes);
    }
}
