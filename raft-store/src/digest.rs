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
//! Only a copy of the state is taken under the apply lock; encoding and
//! hashing happen on the caller's side. Nothing here changes the state, so
//! apply stays deterministic.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::sync::{mpsc, oneshot};

/// The default of [`crate::NodeConfig::digest_every`]: a periodic digest every
/// 1024 applied indexes.
pub const DEFAULT_EVERY: u64 = 1024;

/// Requests for a digest at a future index waiting at once, at most; one
/// more is refused ([`DigestError::Busy`]) rather than queued.
pub const MAX_WAITING: usize = 64;

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
    /// [`MAX_WAITING`] requests are already waiting.
    #[error("{MAX_WAITING} digest requests are already waiting on this gateway; try again later")]
    Busy,
}

/// The digest points of one replica: requests waiting for an index, and
/// the periodic digests' channel. Shared by the apply loop and the node.
pub struct DigestPoints<SM> {
    /// Waiting requests by index; each gets a copy of the state.
    waiting: Mutex<BTreeMap<u64, Vec<oneshot::Sender<SM>>>>,
    /// Number of waiting requests, read without the lock on every entry.
    count: AtomicUsize,
    /// Periodic digests: every `.0`-th index, a copy of the state goes to
    /// `.1` (dropped when the previous one is still being hashed).
    periodic: Mutex<Option<Periodic<SM>>>,
}

/// Where periodic digests go: every how many indexes, and the channel.
type Periodic<SM> = (u64, mpsc::Sender<(u64, SM)>);

impl<SM> Default for DigestPoints<SM> {
    fn default() -> Self {
        DigestPoints {
            waiting: Mutex::new(BTreeMap::new()),
            count: AtomicUsize::new(0),
            periodic: Mutex::new(None),
        }
    }
}

impl<SM: Clone> DigestPoints<SM> {
    /// Sends a copy of the state after every index that is a multiple of
    /// `every` to the returned receiver (capacity one: a copy is dropped
    /// while the previous one is still waiting to be hashed).
    pub fn periodic(&self, every: u64) -> mpsc::Receiver<(u64, SM)> {
        let (tx, rx) = mpsc::channel(1);
        *self.periodic.lock().unwrap_or_else(|p| p.into_inner()) = Some((every.max(1), tx));
        rx
    }

    /// Registers a wait for the state after `index`, given the replica's
    /// `applied` index. Call it under the applied state's read lock, so no
    /// entry is applied between the check and the registration.
    ///
    /// # Errors
    /// [`DigestError::Passed`], [`DigestError::TooFarAhead`],
    /// [`DigestError::Busy`].
    pub fn register(&self, index: u64, applied: u64) -> Result<oneshot::Receiver<SM>, DigestError> {
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
        if held >= MAX_WAITING {
            self.count.store(held, Ordering::Release);
            return Err(DigestError::Busy);
        }
        let (tx, rx) = oneshot::channel();
        waiting.entry(index).or_default().push(tx);
        self.count.store(held + 1, Ordering::Release);
        Ok(rx)
    }

    /// Called by the apply loop after the entry at `index`: hands a copy of
    /// `machine` to the requests waiting for `index`, drops those waiting
    /// for an earlier one (a snapshot install jumped over it: they read
    /// [`DigestError::Passed`]), and feeds the periodic digest.
    pub fn applied(&self, index: u64, machine: &SM) {
        if self.count.load(Ordering::Acquire) > 0 {
            let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            let later = waiting.split_off(&(index + 1));
            let due = std::mem::replace(&mut *waiting, later);
            for (at, senders) in due {
                if at == index {
                    for sender in senders {
                        let _ = sender.send(machine.clone());
                    }
                }
            }
            self.count
                .store(waiting.values().map(Vec::len).sum(), Ordering::Release);
        }
        let periodic = self.periodic.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((every, tx)) = periodic.as_ref() {
            if index > 0 && index.is_multiple_of(*every) && tx.capacity() > 0 {
                let _ = tx.try_send((index, machine.clone()));
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
            .map(|i| points.register(10 + i, 1).expect("registered"))
            .collect();
        assert_eq!(points.register(100, 1).err(), Some(DigestError::Busy));
        held.pop();
        assert!(points.register(100, 1).is_ok());
        assert_eq!(
            points.register(MAX_AHEAD + 2, 1).err(),
            Some(DigestError::TooFarAhead {
                index: MAX_AHEAD + 2,
                applied: 1
            })
        );
    }
}
