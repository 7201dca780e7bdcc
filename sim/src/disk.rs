//! One simulated node's disk: what its raft log and snapshot hold, and what
//! a crash keeps of it.
//!
//! The model is sled's, as `raft-store` uses it (see `docs/storage.md`):
//! - A write (append, truncate, purge, vote, committed) changes what the
//!   process reads at once, and is *pending* until the next sync.
//! - A sync makes every pending write durable (group commit: one sync covers
//!   all writes before it).
//! - A crash (kill -9 or power cut) keeps the durable image plus a *prefix*
//!   of the pending writes, in order, of a length the schedule picks: sled
//!   recovers a prefix of its writes, and a torn last write fails its
//!   checksum and is dropped, which is the same as a shorter prefix.
//! - A snapshot is written to a temporary file, synced and renamed
//!   (`SnapshotDir::store`): durable at once and atomically.
//! - A full disk refuses the log's writes and syncs (the log's callers see
//!   `ENOSPC`, as from sled); what was pending stays pending, for a crash
//!   to cut. Snapshots are not refused (not modelled).
//!
//! The disk outlives the node's process: the harness keeps it across a
//! crash and hands it to the restarted node.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use raft_store::types::typ::{Entry, LogId, SnapshotMeta, Vote};

/// One write to the log's storage, as sled would receive it.
#[derive(Clone, Debug)]
pub enum Op {
    /// `save_vote`.
    Vote(Vote),
    /// `save_committed`: the record's bytes, as sled would store them
    /// (`raft_store::log_store::encode_committed`).
    Committed(Vec<u8>),
    /// One entry of an `append`.
    Append(Box<Entry>),
    /// `truncate`: entries from this index on are removed.
    Truncate(u64),
    /// `purge`: the purge point is recorded, then entries up to it removed.
    Purge(LogId),
}

/// What a disk holds at one moment.
#[derive(Clone, Debug, Default)]
pub struct Image {
    /// The vote.
    pub vote: Option<Vote>,
    /// The committed log id as openraft last saved it, encoded as the
    /// sled log stores it (start-up decodes these bytes).
    pub committed: Option<Vec<u8>>,
    /// The last purged log id.
    pub last_purged: Option<LogId>,
    /// Log entries by index.
    pub log: BTreeMap<u64, Entry>,
    /// The current snapshot: its meta and the state machine's bytes.
    pub snapshot: Option<(SnapshotMeta, Vec<u8>)>,
}

impl Image {
    fn apply(&mut self, op: &Op) {
        match op {
            Op::Vote(vote) => self.vote = Some(*vote),
            Op::Committed(bytes) => self.committed = Some(bytes.clone()),
            Op::Append(entry) => {
                self.log.insert(entry.log_id.index, (**entry).clone());
            }
            Op::Truncate(from) => {
                self.log.split_off(from);
            }
            Op::Purge(upto) => {
                self.last_purged = Some(*upto);
                self.log = self.log.split_off(&(upto.index + 1));
            }
        }
    }
}

/// Counts of what a disk did, for the trace and the checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Syncs done.
    pub syncs: u64,
    /// Crashes survived.
    pub crashes: u64,
    /// Pending writes a crash dropped, over all crashes.
    pub writes_lost: u64,
}

#[derive(Debug, Default)]
struct State {
    /// What survives a crash.
    durable: Image,
    /// What the running process reads: `durable` plus `pending`.
    written: Image,
    /// Writes since the last sync, in order.
    pending: Vec<Op>,
    stats: DiskStats,
    /// No space left: the log's writes and syncs are refused.
    full: bool,
}

/// One node's disk. Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct Disk(Arc<Mutex<State>>);

impl Disk {
    /// An empty disk.
    pub fn new() -> Self {
        Disk::default()
    }

    /// A simulation runs on one thread and nothing panics while holding
    /// the lock except a failed check, which ends the run.
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `op`: visible at once, durable at the next [`Disk::sync`].
    pub fn write(&self, op: Op) {
        let mut state = self.state();
        state.written.apply(&op);
        state.pending.push(op);
    }

    /// Makes every pending write durable.
    pub fn sync(&self) {
        let mut state = self.state();
        let pending = std::mem::take(&mut state.pending);
        for op in &pending {
            state.durable.apply(op);
        }
        state.stats.syncs += 1;
    }

    /// Writes and syncs a snapshot (atomic, like the rename it models).
    /// An older snapshot never replaces a newer one.
    pub fn store_snapshot(&self, meta: SnapshotMeta, data: Vec<u8>) {
        let mut state = self.state();
        let newer = state
            .written
            .snapshot
            .as_ref()
            .is_some_and(|(current, _)| current.last_log_id > meta.last_log_id);
        if newer {
            return;
        }
        state.durable.snapshot = Some((meta.clone(), data.clone()));
        state.written.snapshot = Some((meta, data));
    }

    /// Reads what the running process sees.
    pub fn read<T>(&self, f: impl FnOnce(&Image) -> T) -> T {
        f(&self.state().written)
    }

    /// How many writes are pending (not yet synced).
    pub fn pending(&self) -> usize {
        self.state().pending.len()
    }

    /// The process died: keep the durable image and the first `keep` pending
    /// writes (clamped to how many there are); returns how many were lost.
    pub fn crash(&self, keep: usize) -> usize {
        let mut state = self.state();
        let pending = std::mem::take(&mut state.pending);
        let keep = keep.min(pending.len());
        for op in &pending[..keep] {
            state.durable.apply(op);
        }
        state.written = state.durable.clone();
        let lost = pending.len() - keep;
        state.stats.crashes += 1;
        state.stats.writes_lost += lost as u64;
        lost
    }

    /// What the disk did so far.
    pub fn stats(&self) -> DiskStats {
        self.state().stats
    }

    /// Fills the disk (`true`: the log's writes and syncs fail from now on,
    /// as `ENOSPC` makes sled's) or frees space again.
    pub fn set_full(&self, full: bool) {
        self.state().full = full;
    }

    /// Whether the disk is full ([`Disk::set_full`]).
    pub fn is_full(&self) -> bool {
        self.state().full
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;

    fn entry(index: u64) -> Op {
        Op::Append(Box::new(Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }))
    }

    fn indexes(disk: &Disk) -> Vec<u64> {
        disk.read(|image| image.log.keys().copied().collect())
    }

    /// Synced writes survive a crash; of the pending ones only the prefix
    /// the crash keeps does.
    #[test]
    fn a_crash_keeps_the_synced_writes_and_a_prefix_of_the_rest() {
        let disk = Disk::new();
        disk.write(entry(1));
        disk.write(entry(2));
        disk.sync();
        disk.write(entry(3));
        disk.write(entry(4));
        disk.write(Op::Vote(Vote::new(2, 1)));
        assert_eq!(
            indexes(&disk),
            vec![1, 2, 3, 4],
            "the process reads its writes"
        );
        assert_eq!(disk.crash(1), 2);
        assert_eq!(indexes(&disk), vec![1, 2, 3]);
        assert_eq!(
            disk.read(|image| image.vote),
            None,
            "the vote was not synced"
        );
        assert_eq!(disk.crash(0), 0, "nothing pending after a crash");
        assert_eq!(indexes(&disk), vec![1, 2, 3], "a kept write is durable");
    }

    /// Truncate and purge change what is read at once and are lost like
    /// any other unsynced write.
    #[test]
    fn truncate_and_purge_are_writes_like_the_others() {
        let disk = Disk::new();
        for i in 1..=5 {
            disk.write(entry(i));
        }
        disk.sync();
        disk.write(Op::Truncate(4));
        disk.write(Op::Purge(LogId::new(CommittedLeaderId::new(1, 1), 2)));
        assert_eq!(indexes(&disk), vec![3]);
        disk.crash(0);
        assert_eq!(indexes(&disk), vec![1, 2, 3, 4, 5]);
    }
}
