//! [`Purger`]: removes purged log entries from sled on its own thread, so
//! that raft's core never waits for it.
//!
//! openraft 0.9 runs `RaftLogStorage::purge` on its core task, the task that
//! also answers AppendEntries, sends heartbeats and ticks the election timer.
//! Removing the thousands of entries a snapshot makes obsolete took that
//! task 360-520 ms (debug build, 4,000-5,000 entries, two busy loops on a
//! 2-core machine: `t80` under `scripts/flake-loop.sh`); every node purges
//! right after the same snapshot index, so the followers' cores stalled
//! together, and when they resumed their election timers had run out with
//! the leader's appends still queued: every snapshot deposed a healthy
//! leader and failed the writes in flight (CI, 2026-12-07).
//!
//! `LogStore::purge` now only records the purge point (one small write to
//! the `meta` tree) and hands the removal here. That is safe because
//! nothing reads at or below the recorded point: openraft knows it as
//! `last_purged_log_id` and never asks for those entries,
//! `LogStore::get_log_state` and start-up's contiguity check ignore them,
//! and a crash before the removal ends leaves only such entries (as a crash
//! inside the old inline purge already could). Entries removed late are
//! never entries raft still needs: the removal only ever covers indexes at
//! or below a point openraft already purged, and no index at or below it is
//! ever written again.
//!
//! One thread per opened log; requests that arrive while it works are
//! merged (only the highest point matters). Entries are removed one by one,
//! not as one `sled::Batch`: a batch takes sled's process-wide write lock,
//! which would hold back the core's appends for as long as it takes. The
//! thread ends once every [`Purger`] is dropped, and stops early when that
//! happens mid-removal, so a node closed and opened again in one process is
//! not kept waiting for its old database; what it left is removed at the
//! next open ([`Purger::start`] is told the recorded point).

use std::sync::mpsc;
use std::time::Instant;

/// How many entries are removed between two looks at whether the log was
/// closed.
const CHUNK: u64 = 256;

/// Queues removals of purged entries for the log's purger thread. Cloning
/// shares the thread.
#[derive(Clone)]
pub(crate) struct Purger {
    tx: mpsc::Sender<u64>,
    log: sled::Tree,
}

impl Purger {
    /// Starts the thread for `log`, and queues the removal of what a
    /// previous run left at or below `purged` (the recorded purge point).
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub(crate) fn start(log: sled::Tree, purged: Option<u64>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<u64>();
        let tree = log.clone();
        std::thread::Builder::new()
            .name("raft-purger".into())
            .spawn(move || {
                // A request taken while removing, served next.
                let mut next = None;
                loop {
                    let first = match next.take() {
                        Some(first) => first,
                        // Ends when every sender is dropped.
                        None => match rx.recv() {
                            Ok(first) => first,
                            Err(_) => return,
                        },
                    };
                    let upto = rx.try_iter().fold(first, u64::max);
                    if !remove_upto(&tree, upto, &rx, &mut next) {
                        return;
                    }
                }
            })?;
        let purger = Purger { tx, log };
        if let Some(purged) = purged {
            purger.remove_upto(purged);
        }
        Ok(purger)
    }

    /// Removes every entry at or below `index`, later, on the purger
    /// thread; at once on the caller's if that thread is gone.
    pub(crate) fn remove_upto(&self, index: u64) {
        if self.tx.send(index).is_err() {
            tracing::warn!(
                upto = index,
                "the raft purger thread is gone: removing purged entries inline"
            );
            // A sender kept for the call, so the removal runs to its end.
            let (_open, inbox) = mpsc::channel::<u64>();
            remove_upto(&self.log, index, &inbox, &mut None);
        }
    }
}

/// Removes the entries of `log` at or below `upto`, in index order, and
/// tells whether the log is still open. Every [`CHUNK`] entries it looks at
/// `inbox`: a request found there is kept in `next` (the highest of them);
/// when every sender is gone it stops and returns false.
fn remove_upto(
    log: &sled::Tree,
    upto: u64,
    inbox: &mpsc::Receiver<u64>,
    next: &mut Option<u64>,
) -> bool {
    let started = Instant::now();
    let mut removed = 0u64;
    let mut open = true;
    for item in log.range(..=upto.to_be_bytes()) {
        if let Err(e) = item.and_then(|(key, _)| log.remove(key)) {
            // Harmless: what remains is at or below the recorded purge
            // point, and the next purge covers it again.
            tracing::warn!(upto, error = %e, "cannot remove purged log entries; the next purge retries");
            break;
        }
        removed += 1;
        if removed.is_multiple_of(CHUNK) {
            match inbox.try_recv() {
                Ok(later) => *next = Some(next.map_or(later, |n| n.max(later))),
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
    }
    tracing::debug!(
        upto,
        removed,
        took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "removed purged log entries"
    );
    open
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(entries: u64) -> sled::Tree {
        let db = sled::Config::new()
            .temporary(true)
            .open()
            .expect("temporary sled");
        let log = db.open_tree("log").expect("log tree");
        for index in 1..=entries {
            log.insert(index.to_be_bytes(), b"entry".to_vec())
                .expect("insert");
        }
        log
    }

    fn first_index(log: &sled::Tree) -> Option<u64> {
        log.first()
            .expect("first")
            .map(|(key, _)| u64::from_be_bytes(key.as_ref().try_into().expect("8-byte key")))
    }

    /// What the thread does: everything at or below the point goes, the
    /// rest stays; a request that arrives meanwhile is kept for next.
    #[test]
    fn a_removal_stops_at_its_point_and_keeps_a_later_request() {
        let log = log_of(600);
        let (tx, inbox) = mpsc::channel();
        tx.send(450).expect("send");
        tx.send(500).expect("send");
        let mut next = None;
        assert!(remove_upto(&log, 300, &inbox, &mut next));
        assert_eq!(first_index(&log), Some(301));
        assert_eq!(log.len(), 300);
        // The first look (after 256 entries) took one request; the other
        // is still queued, and the thread's loop merges both.
        assert_eq!(next, Some(450));
        assert_eq!(inbox.try_iter().fold(0, u64::max), 500);
    }

    /// A log closed mid-removal is let go within a chunk.
    #[test]
    fn a_removal_stops_early_once_the_log_is_closed() {
        let log = log_of(600);
        let (tx, inbox) = mpsc::channel::<u64>();
        drop(tx);
        assert!(!remove_upto(&log, 600, &inbox, &mut None));
        assert_eq!(log.len(), 600 - usize::try_from(CHUNK).expect("small"));
    }

    /// Through the thread: queued removals end with the highest point
    /// removed, and what a previous run left is removed at start.
    #[test]
    fn the_thread_removes_up_to_the_highest_point_asked() {
        let log = log_of(1_000);
        let purger = Purger::start(log.clone(), Some(100)).expect("start");
        purger.remove_upto(700);
        purger.remove_upto(400);
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        while first_index(&log) != Some(701) {
            assert!(
                Instant::now() < deadline,
                "entries at or below 700 still there after 30 s: first {:?}",
                first_index(&log)
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(log.len(), 300);
    }
}
