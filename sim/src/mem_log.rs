//! openraft's log storage over a simulated [`Disk`], acknowledging as the
//! sled log does (`raft_store::log_store`):
//! - `append`: the callback fires only after a sync that covers the entries.
//! - `save_vote`: returns only after a sync that covers the vote.
//! - `truncate`, `purge` and `save_committed` are written and made durable
//!   by the next sync (a crash may lose them, as it may on sled).
//!
//! Syncs go through one flusher task per process, in order, each taking a
//! simulated time the schedule draws ([`SyncDelay`]); requests queued while
//! one runs share the next (group commit, like `raft_store::durability`).
//! The flusher dies with the node's process, and with it every callback not
//! yet fired: exactly what a crash before the fsync returns does.

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, RaftLogReader, StorageError};
use raft_store::codec::DecodeError;
use raft_store::log_store::{
    commit_index_at_start, decode_committed, encode_committed, vote_after_restart, MAX_APPEND_BYTES,
};
use raft_store::types::typ::{Entry, LogId, Vote};
use raft_store::{NodeLog, TypeConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, oneshot};

use crate::disk::{Disk, Op};
use crate::trace::Trace;

/// How long one simulated fsync takes: drawn uniformly from a range by a
/// generator seeded by the schedule. Cloning shares the generator.
#[derive(Clone, Debug)]
pub struct SyncDelay {
    rng: Arc<Mutex<StdRng>>,
    min: Duration,
    max: Duration,
}

impl SyncDelay {
    /// Delays in `min..=max`, drawn from `seed`.
    pub fn new(seed: u64, min: Duration, max: Duration) -> Self {
        SyncDelay {
            rng: Arc::new(Mutex::new(StdRng::seed_from_u64(seed))),
            min,
            max: max.max(min),
        }
    }

    /// No delay (the storage suite).
    pub fn none() -> Self {
        SyncDelay::new(0, Duration::ZERO, Duration::ZERO)
    }

    fn next(&self) -> Duration {
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        let micros = rng.gen_range(self.min.as_micros()..=self.max.as_micros());
        Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
    }
}

/// Who waits for a sync.
enum Waiter {
    Append(LogFlushed<TypeConfig>),
    /// Told whether the sync covering the vote succeeded.
    Vote(oneshot::Sender<bool>),
}

/// The raft log of one simulated node. Cloning shares it.
#[derive(Clone)]
pub struct MemLog {
    disk: Disk,
    flusher: mpsc::UnboundedSender<Waiter>,
    committed_index: Arc<AtomicU64>,
    /// Where refused writes are recorded, and the node's name.
    trace: Option<(Trace, String)>,
}

impl MemLog {
    /// Opens the log on `disk` for node `me`, as start-up opens sled: the
    /// node's own committed vote is uncommitted and synced first
    /// (`raft_store::log_store::vote_after_restart`), and the start-up
    /// commit index is decoded from the stored record's bytes as the sled
    /// log does (`raft_store::log_store::commit_index_at_start`). Spawns
    /// the flusher on the current runtime (the node's simulated process).
    ///
    /// # Errors
    /// The stored commit record cannot be decoded.
    pub fn open(disk: Disk, me: u64, delay: SyncDelay) -> Result<Self, DecodeError> {
        if let Some(plain) = disk
            .read(|image| image.vote)
            .and_then(|vote| vote_after_restart(vote, me))
        {
            disk.write(Op::Vote(plain));
            disk.sync();
        }
        let committed = disk.read(|image| commit_index_at_start(image.committed.as_deref()))?;
        let (flusher, requests) = mpsc::unbounded_channel();
        tokio::spawn(flush(disk.clone(), delay, requests));
        Ok(MemLog {
            disk,
            flusher,
            committed_index: Arc::new(AtomicU64::new(committed)),
            trace: None,
        })
    }

    /// Records the writes a full disk refuses in `trace`, as node `name`'s.
    #[must_use]
    pub fn traced(mut self, trace: Trace, name: &str) -> Self {
        self.trace = Some((trace, name.into()));
        self
    }

    fn entries(&self, range: impl RangeBounds<u64>) -> Vec<Entry> {
        self.disk
            .read(|image| image.log.range(range).map(|(_, e)| e.clone()).collect())
    }
}

/// The flusher: one sync at a time, each covering every write before it,
/// then every waiter it covers is told. On a full disk the sync fails:
/// appends are told the error, votes are never confirmed.
async fn flush(disk: Disk, delay: SyncDelay, mut requests: mpsc::UnboundedReceiver<Waiter>) {
    while let Some(first) = requests.recv().await {
        tokio::time::sleep(delay.next()).await;
        let mut waiters = vec![first];
        while let Ok(more) = requests.try_recv() {
            waiters.push(more);
        }
        if disk.is_full() {
            for waiter in waiters {
                match waiter {
                    Waiter::Append(callback) => callback.log_io_completed(Err(no_space())),
                    Waiter::Vote(done) => {
                        let _ = done.send(false);
                    }
                }
            }
            continue;
        }
        disk.sync();
        for waiter in waiters {
            match waiter {
                Waiter::Append(callback) => callback.log_io_completed(Ok(())),
                Waiter::Vote(done) => {
                    let _ = done.send(true);
                }
            }
        }
    }
}

/// What a write or sync on a full disk fails with.
fn no_space() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::StorageFull,
        "no space left on device (simulated)",
    )
}

impl MemLog {
    /// Whether a write (`what`) must be refused because the disk is full,
    /// as sled's would fail; a refusal is recorded in the trace.
    fn refuses(&self, what: &str) -> bool {
        if !self.disk.is_full() {
            return false;
        }
        if let Some((trace, name)) = &self.trace {
            trace.record(format!("{name} disk full: {what} refused"), &[]);
        }
        true
    }
}

fn stopped() -> StorageError<u64> {
    openraft::StorageIOError::write(&std::io::Error::other("the simulated process stopped")).into()
}

impl RaftLogReader<TypeConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<u64>> {
        Ok(self.entries(range))
    }

    /// As the sled log: at most `MAX_APPEND_BYTES` of encoded entries, at
    /// least one.
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError<u64>> {
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        for entry in self.entries(start..end) {
            let size = raft_store::codec::encode(&entry).len();
            if !entries.is_empty() && bytes + size > MAX_APPEND_BYTES {
                break;
            }
            bytes += size;
            entries.push(entry);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for MemLog {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        Ok(self.disk.read(|image| {
            let last = image.log.values().next_back().map(|e| e.log_id);
            LogState {
                last_purged_log_id: image.last_purged,
                last_log_id: last.max(image.last_purged),
            }
        }))
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError<u64>> {
        if self.refuses("save_vote") {
            return Err(openraft::StorageIOError::write_vote(&no_space()).into());
        }
        self.disk.write(Op::Vote(*vote));
        let (done, synced) = oneshot::channel();
        self.flusher
            .send(Waiter::Vote(done))
            .map_err(|_| stopped())?;
        match synced.await {
            Ok(true) => Ok(()),
            Ok(false) => Err(openraft::StorageIOError::write_vote(&no_space()).into()),
            Err(_) => Err(stopped()),
        }
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError<u64>> {
        Ok(self.disk.read(|image| image.vote))
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError<u64>> {
        if self.refuses("save_committed") {
            return Err(openraft::StorageIOError::write_logs(&no_space()).into());
        }
        self.disk.write(Op::Committed(encode_committed(committed)));
        self.committed_index
            .store(committed.map_or(0, |c| c.index), Ordering::Relaxed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError<u64>> {
        match self.disk.read(|image| image.committed.clone()) {
            None => Ok(None),
            Some(bytes) => {
                decode_committed(&bytes).map_err(|e| openraft::StorageIOError::read(&e).into())
            }
        }
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
        if self.refuses("append") {
            return Err(openraft::StorageIOError::write_logs(&no_space()).into());
        }
        for entry in entries {
            self.disk.write(Op::Append(Box::new(entry)));
        }
        self.flusher
            .send(Waiter::Append(callback))
            .map_err(|_| stopped())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError<u64>> {
        if self.refuses("truncate") {
            return Err(openraft::StorageIOError::write_logs(&no_space()).into());
        }
        self.disk.write(Op::Truncate(log_id.index));
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError<u64>> {
        if self.refuses("purge") {
            return Err(openraft::StorageIOError::write_logs(&no_space()).into());
        }
        self.disk.write(Op::Purge(log_id));
        Ok(())
    }
}

impl NodeLog for MemLog {
    fn committed_index(&self) -> u64 {
        self.committed_index.load(Ordering::Relaxed)
    }
}
