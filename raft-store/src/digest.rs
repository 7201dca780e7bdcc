//! Digests of the applied state at an exact log index, to compare replicas
//! (`openshell-pool raft check`, etcd's `endpoint hashkv`).
//!
//! Replicas apply the same log at different moments, so two digests taken
//! "now" rarely describe the same index. A digest here is taken *inside*
//! the apply loop, right after the entry at the asked index and before the
//! next one, so every replica digests the state of the same log prefix:
//!
//! - **On request** ([`DigestPoints::register`]): a caller names an index
//!   not applied yet and waits for it (bounded in number and time).
//! - **Periodically**: every replica digests the state after each index
//!   that is a multiple of `every` (the gateway exports it as metrics,
//!   equal on every replica at equal index).
//!
//! Only a copy of the state is taken under the apply lock, one per index
//! however many requests wait for it ([`StateCopy`], shared); encoding and
//! hashing happen once per copy, on the callers' side. Nothing here changes
//! the state, so apply stays deterministic.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{mpsc, oneshot};

/// The default of [`crate::NodeConfig::digest_every`]: a periodic digest every
/// 1024 applied indexes.
pub const DEFAULT_EVERY: u64 = 1024;

/// Requests for a digest at a future index waiting at once, at most; one
/// more is refused ([`DigestError::Busy`]) rather than queued.
pub const MAX_WAITING: usize = 64;

/// Distinct indexes requests wait for at once, at most: each costs one copy
/// of the state when it is applied. `raft check` asks every gateway for
/// the same index, so one is the usual count.
pub const MAX_WAITING_INDEXES: usize = 4;

/// How far ahead of the applied index a request may ask, at most.
pub const MAX_AHEAD: u64 = 1_000_000;

/// A digest of the applied state: the crc32 of the state machine's
/// deterministic snapshot encoding after applying `applied_index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digest {
    /// The last log index the state reflects.
    pub applied_index: u64,
    /// crc32 of the state machine's snapshot encoding.
    pub crc32: u32,
    /// Length of those bytes.
    pub bytes: u64,
}

impl Digest {
    /// The digest of `encoded`, a state's snapshot encoding at
    /// `applied_index`.
    pub fn of_encoding(applied_index: u64, encoded: &[u8]) -> Digest {
        Digest {
            applied_index,
            crc32: crc32fast::hash(encoded),
            bytes: encoded.len() as u64,
        }
    }
}

/// Why no digest was taken at the asked index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// This replica applied past the index before the request arrived (or
    /// jumped over it by installing a snapshot): ask for a later one.
    #[error("applied index {applied} is already past {index}; ask for a later index")]
    Passed {
        /// The index asked for.
        index: u64,
        /// This replica's applied index.
        applied: u64,
    },
    /// The index was not applied within the wait.
    #[error("applied index {applied} did not reach {index} within {waited_ms} ms")]
    NotReached {
        /// The index asked for.
        index: u64,
        /// This replica's applied index at the end of the wait.
        applied: u64,
        /// How long the request waited.
        waited_ms: u64,
    },
    /// The index is further ahead than [`MAX_AHEAD`].
    #[error("index {index} is more than {MAX_AHEAD} entries ahead of the applied index {applied}")]
    TooFarAhead {
        /// The index asked for.
        index: u64,
        /// This replica's applied index.
        applied: u64,
    },
    /// [`MAX_WAITING`] requests, or requests for [`MAX_WAITING_INDEXES`]
    /// other indexes, are already waiting.
    #[error("{MAX_WAITING} digest requests, or requests for {MAX_WAITING_INDEXES} other indexes, are already waiting on this gateway; try again later")]
    Busy,
}

/// One copy of the state after an index, shared by every request waiting
/// for that index; its digest is computed once, by the first to ask.
pub struct StateCopy<SM> {
    index: u64,
    machine: SM,
    digest: OnceLock<Digest>,
}

impl<SM> StateCopy<SM> {
    pub(crate) fn new(index: u64, machine: SM) -> Arc<Self> {
        Arc::new(StateCopy {
            index,
            machine,
            digest: OnceLock::new(),
        })
    }

    /// The index this copy was taken after.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The digest of this copy, encoding it with `encode` on the first call
    /// only (later callers wait for that one and share its result).
    pub fn digest(&self, encode: impl FnOnce(&SM) -> Vec<u8>) -> Digest {
        *self
            .digest
            .get_or_init(|| Digest::of_encoding(self.index, &encode(&self.machine)))
    }
}

/// The digest points of one replica: requests waiting for an index, and
/// the periodic digests' channel. Shared by the apply loop and the node.
pub struct DigestPoints<SM> {
    /// Waiting requests by index; those of one index share one copy.
    waiting: Mutex<BTreeMap<u64, Vec<CopySender<SM>>>>,
    /// Number of waiting requests, read without the lock on every entry.
    count: AtomicUsize,
    /// Periodic digests, set once: every `.0`-th index, a copy of the state
    /// goes to `.1` (dropped when the previous one is still being hashed).
    periodic: OnceLock<Periodic<SM>>,
}

/// Where a waiting request's copy goes.
type CopySender<SM> = oneshot::Sender<Arc<StateCopy<SM>>>;

/// Where periodic digests go: every how many indexes, and the channel.
type Periodic<SM> = (u64, mpsc::Sender<Arc<StateCopy<SM>>>);

impl<SM> Default for DigestPoints<SM> {
    fn default() -> Self {
        DigestPoints {
            waiting: Mutex::new(BTreeMap::new()),
            count: AtomicUsize::new(0),
            periodic: OnceLock::new(),
        }
    }
}

impl<SM: Clone> DigestPoints<SM> {
    /// Sends a copy of the state after every index that is a multiple of
    /// `every` to the returned receiver (capacity one: a copy is dropped
    /// while the previous one is still waiting to be hashed). Set once per
    /// node: a second call gets a receiver that never receives.
    pub fn periodic(&self, every: u64) -> mpsc::Receiver<Arc<StateCopy<SM>>> {
        let (tx, rx) = mpsc::channel(1);
        let _ = self.periodic.set((every.max(1), tx));
        rx
    }

    /// Registers a wait for the state after `index`, given the replica's
    /// `applied` index. Call it under the applied state's read lock, so no
    /// entry is applied between the check and the registration.
    ///
    /// # Errors
    /// [`DigestError::Passed`], [`DigestError::TooFarAhead`],
    /// [`DigestError::Busy`].
    pub fn register(
        &self,
        index: u64,
        applied: u64,
    ) -> Result<oneshot::Receiver<Arc<StateCopy<SM>>>, DigestError> {
        if index <= applied {
            return Err(DigestError::Passed { index, applied });
        }
        if index - applied > MAX_AHEAD {
            return Err(DigestError::TooFarAhead { index, applied });
        }
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        // Requests whose caller gave up hold no slot.
        waiting.retain(|_, senders| {
            senders.retain(|s| !s.is_closed());
            !senders.is_empty()
        });
        let held: usize = waiting.values().map(Vec::len).sum();
        let new_index = !waiting.contains_key(&index);
        if held >= MAX_WAITING || (new_index && waiting.len() >= MAX_WAITING_INDEXES) {
            self.count.store(held, Ordering::Release);
            return Err(DigestError::Busy);
        }
        let (tx, rx) = oneshot::channel();
        waiting.entry(index).or_default().push(tx);
        self.count.store(held + 1, Ordering::Release);
        Ok(rx)
    }

    /// Called by the apply loop after the entry at `index`: hands one copy
    /// of `machine` to the requests waiting for `index`, drops those waiting
    /// for an earlier one (a snapshot install jumped over it: they read
    /// [`DigestError::Passed`]), and feeds the periodic digest.
    pub fn applied(&self, index: u64, machine: &SM) {
        if self.count.load(Ordering::Acquire) > 0 {
            let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            let later = waiting.split_off(&(index + 1));
            let mut due = std::mem::replace(&mut *waiting, later);
            // Earlier indexes' senders are dropped with `due`: closed.
            if let Some(senders) = due.remove(&index) {
                if senders.iter().any(|s| !s.is_closed()) {
                    let copy = StateCopy::new(index, machine.clone());
                    for sender in senders {
                        let _ = sender.send(Arc::clone(&copy));
                    }
                }
            }
            self.count
                .store(waiting.values().map(Vec::len).sum(), Ordering::Release);
        }
        if let Some((every, tx)) = self.periodic.get() {
            if index > 0 && index.is_multiple_of(*every) && tx.capacity() > 0 {
                let _ = tx.try_send(StateCopy::new(index, machine.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state machine stand-in: digest points only clone it.
    #[derive(Clone, Default)]
    struct Machine;

    #[test]
    fn a_request_is_answered_after_its_index_and_refused_once_passed() {
        let points = DigestPoints::<Machine>::default();
        assert_eq!(
            points.register(5, 5).err(),
            Some(DigestError::Passed {
                index: 5,
                applied: 5
            })
        );
        let mut rx = points.register(7, 5).expect("registered");
        points.applied(6, &Machine);
        assert!(rx.try_recv().is_err(), "not at index 6");
        points.applied(7, &Machine);
        assert!(rx.try_recv().is_ok(), "answered at index 7");
        assert_eq!(points.count.load(Ordering::Acquire), 0);
    }

    #[test]
    fn an_index_jumped_over_closes_its_requests() {
        let points = DigestPoints::<Machine>::default();
        let mut rx = points.register(3, 1).expect("registered");
        points.applied(10, &Machine);
        assert!(matches!(
            rx.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
    }

    #[test]
    fn waiting_requests_are_bounded_and_abandoned_ones_free_their_slot() {
        let points = DigestPoints::<Machine>::default();
        let mut held: Vec<_> = (0..MAX_WAITING as u64)
            .map(|i| {
                let index = 10 + i % MAX_WAITING_INDEXES as u64;
                points.register(index, 1).expect("registered")
            })
            .collect();
        assert_eq!(points.register(10, 1).err(), Some(DigestError::Busy));
        held.pop();
        assert!(points.register(10, 1).is_ok());
        assert_eq!(
            points.register(MAX_AHEAD + 2, 1).err(),
            Some(DigestError::TooFarAhead {
                index: MAX_AHEAD + 2,
                applied: 1
            })
        );
    }

    #[test]
    fn requests_for_one_index_share_one_copy_and_one_digest() {
        let points = DigestPoints::<Machine>::default();
        let mut first = points.register(4, 1).expect("registered");
        let mut second = points.register(4, 1).expect("registered");
        points.applied(4, &Machine);
        let (a, b) = (
            first.try_recv().expect("a copy"),
            second.try_recv().expect("a copy"),
        );
        assert!(Arc::ptr_eq(&a, &b), "one copy for both requests");
        let mut encodings = 0;
        let da = a.digest(|_| {
            encodings += 1;
            vec![1, 2, 3]
        });
        let db = b.digest(|_| unreachable!("encoded once"));
        assert_eq!((da, encodings, a.index()), (db, 1, 4));
    }

    #[test]
    fn distinct_waiting_indexes_are_bounded() {
        let points = DigestPoints::<Machine>::default();
        let _held: Vec<_> = (0..MAX_WAITING_INDEXES as u64)
            .map(|i| points.register(10 + i, 1).expect("registered"))
            .collect();
        assert_eq!(points.register(100, 1).err(), Some(DigestError::Busy));
        assert!(
            points.register(10, 1).is_ok(),
            "a waited-for index takes more"
        );
    }
}
