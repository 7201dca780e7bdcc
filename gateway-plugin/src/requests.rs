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

use std::collections::{BTreeMap, VecDeque};

use proto::gateway::{LogResult, RequestRecord};
use raft_store::SnapshotError;

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

/// The remembered outcomes, oldest first.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestTable {
    /// Request id -> (log index that applied it, its outcome).
    by_id: BTreeMap<String, (u64, LogResult)>,
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

    /// The remembered (log index, outcome) of `id`.
    pub fn get(&self, id: &str) -> Option<&(u64, LogResult)> {
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

    /// Remembers the outcome of `id`, applied at `log_index`, forgetting the
    /// oldest ids beyond the capacity. An id already remembered keeps its
    /// first outcome (apply never records one twice: it replays instead).
    pub fn record(&mut self, id: &str, log_index: u64, result: LogResult) {
        if self.by_id.contains_key(id) {
            return;
        }
        self.by_id.insert(id.to_string(), (log_index, result));
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
                self.by_id.get(id).map(|(log_index, result)| RequestRecord {
                    request_id: id.clone(),
                    log_index: *log_index,
                    result: Some(result.clone()),
                })
            })
            .collect()
    }

    /// Rebuilds the table from snapshot records (oldest first), keeping the
    /// newest `capacity` of them.
    ///
    /// # Errors
    /// A record without an id or an outcome, or an id twice.
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
            table.record(&record.request_id, record.log_index, result);
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
            table.record(id, i as u64 + 1, outcome(i as u8));
        }
        assert_eq!(table.len(), 3);
        assert!(table.get("a").is_none(), "a is the oldest");
        assert_eq!(table.get("b").map(|r| r.0), Some(2));
        // Recording a remembered id keeps its first outcome and its place.
        table.record("b", 9, outcome(9));
        assert_eq!(table.get("b"), Some(&(2, outcome(1))));
        table.record("e", 5, outcome(5));
        assert!(table.get("b").is_none(), "b is now the oldest");
    }

    #[test]
    fn the_table_round_trips_through_its_records_in_apply_order() {
        let mut table = RequestTable::with_capacity(10);
        for (i, id) in ["z", "a", "m"].iter().enumerate() {
            table.record(id, i as u64 + 1, outcome(i as u8));
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
        let mut twice = records;
        twice.push(twice[0].clone());
        assert!(RequestTable::from_records(twice, 10).is_err());
    }
}
