//! openraft's log storage over sled.
//!
//! Entries live in the `log` tree under their big-endian index, so a range
//! scan returns them in order. The vote, the committed log id and the last
//! purged log id live in the `meta` tree.
//!
//! What is durable when (see `docs/storage.md`):
//! - `append`: entries are inserted, then the append callback fires only after
//!   the flusher thread's `flush` + `fdatasync` that covers them.
//! - `save_vote`: returns only after the vote is durable.
//! - `purge`: the new last-purged id is written, then the entries at or
//!   below it are removed later, off raft's core (`crate::purger`); sled
//!   recovers a prefix of its writes, and nothing reads at or below the
//!   recorded id, so a crash never leaves a gap that `get_log_state` cannot
//!   explain. Entries a crash left behind are removed at the next open.
//! - `truncate` and `save_committed` are made durable by the next flush; losing
//!   them in a crash is allowed by raft (truncated entries are truncated again,
//!   the committed index is re-learned).
//!
//! All of the above holds for [`LogSync::Durable`], the default. With
//! [`LogSync::UnsafeNoSyncForBenchmarks`] (set by benchmarks only, see
//! `crate::config`) appends and votes are acknowledged as soon as sled holds
//! them, with no flush at all: it measures the log's cost without the disk.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, RaftLogId, RaftLogReader, StorageError, StorageIOError};

use crate::codec;
use crate::config::LogSync;
use crate::db::{DataDir, Durability, Watermark};
use crate::purger::Purger;
use crate::types::typ::{Entry, LogId, Vote};
use crate::types::TypeConfig;

/// Most bytes of log entries in one AppendEntries (see
/// `limited_get_log_entries`): at disk and loopback speeds here a follower
/// receives and fsyncs this well within the default 50 ms heartbeat.
pub const MAX_APPEND_BYTES: usize = 512 * 1024;

/// A record of the `meta` tree: its key and the one type stored under it.
/// Every read and write of a record goes through it, so no path (start-up,
/// openraft's reads) can decode a record as another type. (One did: start-up
/// read the `Option<LogId>` stored under `committed` as a bare `LogId`, one
/// byte off, and took a commit index 256 times the real one.)
struct MetaRecord<T> {
    key: &'static [u8],
    stored: PhantomData<fn() -> T>,
}

impl<T> MetaRecord<T> {
    const fn new(key: &'static [u8]) -> Self {
        MetaRecord {
            key,
            stored: PhantomData,
        }
    }
}

/// The vote, durable before `save_vote` returns.
const VOTE: MetaRecord<Vote> = MetaRecord::new(b"vote");
/// The committed log id exactly as openraft hands it to `save_committed`.
const COMMITTED: MetaRecord<Option<LogId>> = MetaRecord::new(b"committed");
/// The last purged log id, written before the purged entries are removed.
const LAST_PURGED: MetaRecord<LogId> = MetaRecord::new(b"last_purged");

/// The bytes stored under the `committed` record for `committed`: the one
/// encoding of it, shared with the simulation's in-memory log, which keeps
/// it as these bytes so that start-up decodes what sled would hold.
pub fn encode_committed(committed: Option<LogId>) -> Vec<u8> {
    codec::encode(&committed)
}

/// Decodes the `committed` record's bytes as openraft's `read_committed`
/// takes them.
///
/// # Errors
/// The bytes are not an encoded `Option<LogId>`.
pub fn decode_committed(bytes: &[u8]) -> Result<Option<LogId>, codec::DecodeError> {
    codec::decode(bytes, "committed")
}

/// The commit index a node finds at start-up in its stored `committed`
/// record (`None`: never saved, 0). Readiness waits until the node applied
/// up to it, so a wrong figure keeps a restarted gateway out of service.
///
/// # Errors
/// The bytes are not an encoded `Option<LogId>`.
pub fn commit_index_at_start(stored: Option<&[u8]>) -> Result<u64, codec::DecodeError> {
    let Some(bytes) = stored else {
        return Ok(0);
    };
    if crate::fault::committed_as_log_id() {
        // The bug, put back for the simulation's proof: the `Option<LogId>`
        // read as a bare `LogId`, one byte off.
        let bare: LogId = codec::decode(bytes, "committed")?;
        return Ok(bare.index);
    }
    Ok(decode_committed(bytes)?.map_or(0, |c| c.index))
}

/// The raft log of one node. Cloning shares it (the clone is the log reader).
#[derive(Clone)]
pub struct LogStore {
    log: sled::Tree,
    meta: sled::Tree,
    durability: Durability,
    watermark: Arc<Watermark>,
    /// The last committed index openraft reported; read by status.
    committed_index: Arc<AtomicU64>,
    /// Whether appends and votes wait for the disk (the default) or not
    /// (benchmarks only).
    sync: LogSync,
    /// Removes purged entries off raft's core.
    purger: Purger,
}

impl LogStore {
    /// The log of an opened data directory.
    pub fn new(dir: &DataDir) -> Result<Self, StorageError<u64>> {
        let purged = read_meta(&dir.meta, &LAST_PURGED)?.map(|id| id.index);
        let purger =
            Purger::start(dir.log.clone(), purged).map_err(|e| StorageIOError::write_logs(&e))?;
        let store = LogStore {
            log: dir.log.clone(),
            meta: dir.meta.clone(),
            durability: dir.durability.clone(),
            watermark: dir.watermark.clone(),
            committed_index: Arc::new(AtomicU64::new(0)),
            sync: LogSync::Durable,
            purger,
        };
        let stored = store
            .meta
            .get(COMMITTED.key)
            .map_err(|e| StorageIOError::read(&e))?;
        let at_start =
            commit_index_at_start(stored.as_deref()).map_err(|e| StorageIOError::read(&e))?;
        store.committed_index.store(at_start, Ordering::Relaxed);
        Ok(store)
    }

    /// The same log, acknowledging appends and votes as `sync` says
    /// (default [`LogSync::Durable`]).
    pub fn with_sync(mut self, sync: LogSync) -> Self {
        if sync == LogSync::UnsafeNoSyncForBenchmarks {
            tracing::warn!(
                "the raft log acknowledges appends and votes without flushing them \
                 (LogSync::UnsafeNoSyncForBenchmarks): a crash loses acknowledged writes"
            );
        }
        self.sync = sync;
        self
    }

    /// The last committed index this node knows of.
    pub fn committed_index(&self) -> u64 {
        self.committed_index.load(Ordering::Relaxed)
    }

    /// The committed log id as stored, for openraft's `read_committed`
    /// (start-up takes only its index, through [`commit_index_at_start`]).
    fn stored_committed(&self) -> Result<Option<LogId>, StorageError<u64>> {
        Ok(self.read_meta(&COMMITTED)?.flatten())
    }

    fn read_meta<T: serde::de::DeserializeOwned>(
        &self,
        record: &MetaRecord<T>,
    ) -> Result<Option<T>, StorageError<u64>> {
        read_meta(&self.meta, record)
    }

    fn write_meta<T: serde::Serialize>(
        &self,
        record: &MetaRecord<T>,
        value: &T,
    ) -> Result<(), StorageError<u64>> {
        self.meta
            .insert(record.key, codec::encode(value))
            .map_err(|e| StorageIOError::write(&e))?;
        Ok(())
    }

    /// Turns a committed vote back into a plain vote for the same leader and
    /// term, durably, so that a restarted node never resumes leadership
    /// without an election. Start-up calls it before raft starts.
    ///
    /// openraft 0.9 restores a node whose stored vote is committed for itself
    /// as leader at once (`Engine::startup`), with its old term's first entry
    /// as its noop and the commit index stored before the restart. That
    /// index is saved without an fsync (`save_committed`), so after a power
    /// loss it can lag the writes the node had already acknowledged; the
    /// restored leader's read index, `max(noop, committed)`, then misses them
    /// and a linearizable read returns older data. The Jepsen `power-cut`
    /// nemesis found it (docs/jepsen.md, power-loss results). An uncommitted
    /// vote still forbids voting for another node in that term; the node
    /// campaigns for the next, and its new noop makes the read index cover
    /// every committed entry.
    ///
    /// # Errors
    /// The vote cannot be read, written or synced.
    pub(crate) fn forget_leadership(&self, me: u64) -> Result<(), StorageError<u64>> {
        if let Some(plain) = self
            .read_meta(&VOTE)?
            .and_then(|vote| vote_after_restart(vote, me))
        {
            self.write_meta(&VOTE, &plain)?;
            self.durability
                .sync_blocking()
                .map_err(|e| StorageIOError::write_vote(&e))?;
        }
        Ok(())
    }

    fn last_entry_log_id(&self) -> Result<Option<LogId>, StorageError<u64>> {
        match self.log.last().map_err(|e| StorageIOError::read_logs(&e))? {
            None => Ok(None),
            Some((key, bytes)) => {
                let entry: Entry = codec::decode(&bytes, format!("log entry {}", index_of(&key)))
                    .map_err(|e| StorageIOError::read_logs(&e))?;
                Ok(Some(*entry.get_log_id()))
            }
        }
    }
}

/// The record `record` of the `meta` tree, if written.
fn read_meta<T: serde::de::DeserializeOwned>(
    meta: &sled::Tree,
    record: &MetaRecord<T>,
) -> Result<Option<T>, StorageError<u64>> {
    let what = String::from_utf8_lossy(record.key).into_owned();
    match meta.get(record.key).map_err(|e| StorageIOError::read(&e))? {
        None => Ok(None),
        Some(bytes) => codec::decode(&bytes, what)
            .map(Some)
            .map_err(|e| StorageIOError::read(&e).into()),
    }
}

/// The vote node `me` must restart from in place of its stored `vote`, if
/// another: this node's own committed vote, uncommitted (see
/// `LogStore::forget_leadership`, which writes it durably before raft
/// starts; the simulation's in-memory log applies the same rule).
///
/// Only this node's own leadership: a follower's committed vote for another
/// leader restores it as a follower, which is safe, and rewriting it kept a
/// restarted cluster that had lost its leader from electing a new one (cli
/// t60's resume).
pub fn vote_after_restart(vote: Vote, me: u64) -> Option<Vote> {
    if crate::fault::restart_as_leader() {
        return None;
    }
    (vote.committed && vote.leader_id().voted_for() == Some(me)).then_some(Vote {
        committed: false,
        ..vote
    })
}

/// The sled key of a log index.
fn key_of(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The log index of a sled key (keys are always 8 bytes; a shorter key reads as 0).
fn index_of(key: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    let n = key.len().min(8);
    buf[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(buf)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<u64>> {
        let start = match range.start_bound() {
            Bound::Included(i) => Bound::Included(key_of(*i)),
            Bound::Excluded(i) => Bound::Excluded(key_of(*i)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => Bound::Included(key_of(*i)),
            Bound::Excluded(i) => Bound::Excluded(key_of(*i)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut entries = Vec::new();
        for item in self.log.range::<[u8; 8], _>((start, end)) {
            let (key, bytes) = item.map_err(|e| StorageIOError::read_logs(&e))?;
            let entry: Entry = codec::decode(&bytes, format!("log entry {}", index_of(&key)))
                .map_err(|e| StorageIOError::read_logs(&e))?;
            entries.push(entry);
        }
        Ok(entries)
    }

    /// The entries openraft sends in one AppendEntries: from `start`, at
    /// most [`MAX_APPEND_BYTES`] of them (always at least one). openraft 0.9
    /// bounds every AppendEntries by the heartbeat interval; a request the
    /// follower cannot receive and fsync in that time is retried forever, so
    /// a follower or learner far behind a log of large entries never caught
    /// up. Bounded in bytes, each request fits and the next one continues.
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError<u64>> {
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        for item in self.log.range(key_of(start)..key_of(end)) {
            let (key, value) = item.map_err(|e| StorageIOError::read_logs(&e))?;
            if !entries.is_empty() && bytes + value.len() > MAX_APPEND_BYTES {
                break;
            }
            bytes += value.len();
            let entry: Entry = codec::decode(&value, format!("log entry {}", index_of(&key)))
                .map_err(|e| StorageIOError::read_logs(&e))?;
            entries.push(entry);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let last_purged_log_id = self.read_meta(&LAST_PURGED)?;
        // After a crash inside `purge`, entries at or below the purge point may remain.
        let last_log_id = self.last_entry_log_id()?.max(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError<u64>> {
        self.write_meta(&VOTE, vote)?;
        self.watermark.voted(vote.leader_id.term);
        if self.sync == LogSync::UnsafeNoSyncForBenchmarks {
            return Ok(());
        }
        self.durability
            .sync()
            .await
            .map_err(|e| StorageIOError::write_vote(&e))?;
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError<u64>> {
        self.read_meta(&VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError<u64>> {
        self.write_meta(&COMMITTED, &committed)?;
        self.committed_index
            .store(committed.map(|c| c.index).unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError<u64>> {
        self.stored_committed()
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        // One insert per entry, in index order: `apply_batch` takes sled's
        // process-wide write lock, which a running flush holds, so it would
        // wait for the previous fsync. sled recovers a prefix of its writes,
        // and the callback fires only after flush + fdatasync.
        let mut last = None;
        for entry in entries {
            let index = entry.get_log_id().index;
            self.log
                .insert(key_of(index), codec::encode(&entry))
                .map_err(|e| StorageIOError::write_logs(&e))?;
            last = Some(index);
        }
        if let Some(last) = last {
            self.watermark.appended(last);
        }
        if self.sync == LogSync::UnsafeNoSyncForBenchmarks {
            callback.log_io_completed(Ok(()));
            return Ok(());
        }
        // The callback fires from the flusher thread once the entries are on disk.
        self.durability
            .sync_then(move |result| callback.log_io_completed(result));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError<u64>> {
        tracing::debug!(from = log_id.index, "truncate log");
        self.watermark
            .truncating(log_id.index.saturating_sub(1))
            .map_err(|e| StorageIOError::write_logs(&e))?;
        let mut batch = sled::Batch::default();
        for item in self.log.range(key_of(log_id.index)..) {
            let (key, _) = item.map_err(|e| StorageIOError::write_logs(&e))?;
            batch.remove(key);
        }
        self.log
            .apply_batch(batch)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError<u64>> {
        tracing::debug!(upto = log_id.index, "purge log");
        // Record the purge point, then leave the removal to the purger
        // thread (crate::purger): from here on nothing reads at or below it.
        self.write_meta(&LAST_PURGED, &log_id)?;
        self.purger.remove_upto(log_id.index);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, RaftLogReader};

    use super::*;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn open(path: &std::path::Path) -> (DataDir, LogStore) {
        let dir = DataDir::open(path, "meta-test", 1, 8 * 1024 * 1024).expect("open data dir");
        let log = LogStore::new(&dir).expect("log store");
        (dir, log)
    }

    /// Start-up's `forget_leadership` turns this node's committed vote for
    /// itself into a plain vote for the same term, durably; a plain vote and
    /// a committed vote for another leader stay.
    #[tokio::test]
    async fn a_committed_vote_is_forgotten_as_leadership_but_kept_as_a_vote() {
        let tmp = tempfile::tempdir().expect("tempdir");
        {
            let (_dir, mut log) = open(tmp.path());
            log.save_vote(&Vote::new_committed(7, 1))
                .await
                .expect("save vote");
            log.forget_leadership(1).expect("forget leadership");
        }
        let (_dir, mut log) = open(tmp.path());
        assert_eq!(
            log.read_vote().await.expect("read vote"),
            Some(Vote::new(7, 1))
        );
        log.forget_leadership(1).expect("again");
        assert_eq!(
            log.read_vote().await.expect("read vote"),
            Some(Vote::new(7, 1))
        );
        // A follower's committed vote for another leader stays committed.
        log.save_vote(&Vote::new_committed(8, 2))
            .await
            .expect("save vote");
        log.forget_leadership(1).expect("a follower");
        assert_eq!(
            log.read_vote().await.expect("read vote"),
            Some(Vote::new_committed(8, 2))
        );
    }

    /// Every meta record written through openraft's storage API reads back
    /// the same after a restart, through the path start-up uses
    /// (`LogStore::new`) as well as openraft's (`read_vote`,
    /// `read_committed`, `get_log_state`). Indexes above 255 catch a record
    /// decoded one byte off.
    #[tokio::test]
    async fn every_meta_record_survives_a_restart_through_the_start_up_path() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let vote = Vote::new_committed(7, 2);
        let committed = log_id(7, 10_000);
        let purged = log_id(6, 4_321);
        {
            let (dir, mut log) = open(tmp.path());
            log.save_vote(&vote).await.expect("save vote");
            log.save_committed(Some(committed))
                .await
                .expect("save committed");
            log.purge(purged).await.expect("purge");
            dir.durability.sync().await.expect("sync");
        }
        let (_dir, mut log) = open(tmp.path());
        assert_eq!(log.committed_index(), 10_000, "start-up commit index");
        assert_eq!(
            log.read_committed().await.expect("read committed"),
            Some(committed)
        );
        assert_eq!(log.read_vote().await.expect("read vote"), Some(vote));
        let state = log.get_log_state().await.expect("log state");
        assert_eq!(state.last_purged_log_id, Some(purged));
        assert_eq!(
            log.try_get_log_entries(0..10).await.expect("entries"),
            vec![]
        );
    }

    /// The shared encoding of the `committed` record (the simulation's log
    /// keeps these bytes): it round-trips, start-up takes its index, a
    /// record never saved reads as 0 and a malformed one is an error.
    #[test]
    fn the_committed_record_encoding_round_trips_and_start_up_reads_its_index() {
        let committed = Some(log_id(3, 70_000));
        let bytes = encode_committed(committed);
        assert_eq!(decode_committed(&bytes).expect("decode"), committed);
        assert_eq!(commit_index_at_start(Some(&bytes)).expect("index"), 70_000);
        assert_eq!(commit_index_at_start(None).expect("absent"), 0);
        let none = encode_committed(None);
        assert_eq!(commit_index_at_start(Some(&none)).expect("none"), 0);
        assert!(commit_index_at_start(Some(&[1, 2])).is_err());
    }

    /// One AppendEntries carries at most `MAX_APPEND_BYTES` of entries, at
    /// least one entry, and continues where the previous one stopped.
    /// `purge` records its point at once and leaves the removal to the
    /// purger thread: openraft sees the purge before the entries are gone,
    /// entries above the point stay, and entries a crash left at or below
    /// it are removed at the next open.
    #[tokio::test]
    async fn a_purge_is_recorded_at_once_and_its_entries_removed_off_the_core() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let entry = |index: u64| Entry {
            log_id: log_id(1, index),
            payload: openraft::EntryPayload::Blank,
        };
        let gone_upto = |log: &LogStore, upto: u64| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let first = log.log.first().expect("first").map(|(k, _)| index_of(&k));
                if first == Some(upto + 1) {
                    return;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "entries at or below {upto} still there after 30 s: first {first:?}"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        };
        {
            let (_dir, mut log) = open(tmp.path());
            for index in 1..=2_000 {
                log.log
                    .insert(key_of(index), codec::encode(&entry(index)))
                    .expect("insert");
            }
            log.purge(log_id(1, 1_500)).await.expect("purge");
            let state = log.get_log_state().await.expect("log state");
            assert_eq!(state.last_purged_log_id, Some(log_id(1, 1_500)));
            assert_eq!(state.last_log_id, Some(log_id(1, 2_000)));
            gone_upto(&log, 1_500);
            assert_eq!(log.log.len(), 500);
            // A crash before the removal ended: entries at or below the
            // recorded point are back on disk.
            for index in 1_000..=1_500 {
                log.log
                    .insert(key_of(index), codec::encode(&entry(index)))
                    .expect("insert");
            }
        }
        let (_dir, mut log) = open(tmp.path());
        let state = log.get_log_state().await.expect("log state");
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 1_500)));
        gone_upto(&log, 1_500);
        assert_eq!(
            log.try_get_log_entries(1_501..=2_000)
                .await
                .expect("entries")
                .len(),
            500
        );
    }

    #[tokio::test]
    async fn append_entries_are_bounded_in_bytes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (_dir, mut log) = open(tmp.path());
        let big = |index: u64, bytes: usize| Entry {
            log_id: log_id(1, index),
            payload: openraft::EntryPayload::Normal(crate::types::Command(vec![vec![7u8; bytes]])),
        };
        for index in 1..=40 {
            let entry = big(index, 60 * 1024);
            log.log
                .insert(key_of(index), codec::encode(&entry))
                .expect("insert");
        }
        let first = log.limited_get_log_entries(1, 41).await.expect("first");
        assert!((1..40).contains(&first.len()), "{} entries", first.len());
        let bytes: usize = first.len() * 60 * 1024;
        assert!(bytes <= MAX_APPEND_BYTES, "{bytes} bytes in one request");
        let next = first.len() as u64 + 1;
        let second = log.limited_get_log_entries(next, 41).await.expect("second");
        assert_eq!(second.first().map(|e| e.log_id.index), Some(next));

        // An entry larger than the bound still goes, alone.
        log.log
            .insert(key_of(41), codec::encode(&big(41, MAX_APPEND_BYTES + 1)))
            .expect("insert");
        let alone = log.limited_get_log_entries(41, 42).await.expect("alone");
        assert_eq!(alone.len(), 1);
    }

    /// A node that never committed anything starts at commit index 0, and a
    /// `save_committed(None)` reads back as none.
    #[tokio::test]
    async fn an_absent_or_none_committed_record_reads_as_none() {
        let tmp = tempfile::tempdir().expect("tempdir");
        {
            let (dir, mut log) = open(tmp.path());
            assert_eq!(log.committed_index(), 0);
            log.save_committed(None).await.expect("save none");
            dir.durability.sync().await.expect("sync");
        }
        let (_dir, mut log) = open(tmp.path());
        assert_eq!(log.committed_index(), 0);
        assert_eq!(log.read_committed().await.expect("read committed"), None);
    }
}
