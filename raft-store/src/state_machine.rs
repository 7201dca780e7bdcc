//! The [`StateMachine`] trait and openraft's state-machine storage over it.
//!
//! The state machine lives in memory; its durable form is the raft log plus the
//! latest snapshot file. On start the node loads the snapshot and openraft
//! re-applies the committed log after it, so the applied state is always a
//! function of (snapshot, log) and never written half-way.
//!
//! Snapshots are built without blocking apply: the builder clones the state
//! under the lock (a memory copy) and encodes and writes it outside the lock.
//! A snapshot file is written to a temporary name, fsynced, renamed over
//! `current.snap` and the directory fsynced, so installing one is atomic.
//!
//! Snapshot file format (version 1):
//!
//! ```text
//! magic "OSSNAP01" | u32 LE meta length | meta (codec v1) | u64 LE data length | data | u32 LE crc32 of all before
//! ```

use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageError, StorageIOError};
use tracing::Instrument;

use crate::codec;
use crate::db::sync_dir;
use crate::digest::DigestPoints;
use crate::error::{Error, InvalidCommand, Result, SnapshotError};
use crate::types::typ::{Entry, LogId, Snapshot, SnapshotMeta, StoredMembership};
use crate::types::{Reply, TypeConfig};

/// A deterministic state machine replicated by raft-store.
///
/// Implementations must be pure: `apply` may not read clocks, randomness, the
/// disk or the network, nor depend on hash-map iteration order. Replicas that
/// apply the same log reach byte-identical [`StateMachine::snapshot`] bytes.
pub trait StateMachine: Clone + Default + Send + Sync + 'static {
    /// Checks that `command` is a well-formed command before it is proposed.
    /// A command that passes must never make `apply` panic.
    ///
    /// # Errors
    /// [`InvalidCommand`] saying what is malformed; the command is not
    /// proposed.
    fn validate(command: &[u8]) -> std::result::Result<(), InvalidCommand>;

    /// Applies one committed command at log position `index` and returns the
    /// response in the machine's wire format. A command whose preconditions
    /// fail changes nothing and returns a rejection. An undecodable command is
    /// a broken invariant (it passed `validate` on the leader) and may panic.
    fn apply(&mut self, index: u64, command: &[u8]) -> Vec<u8>;

    /// Encodes the whole state deterministically.
    fn snapshot(&self) -> Vec<u8>;

    /// Decodes a state written by [`StateMachine::snapshot`].
    ///
    /// # Errors
    /// [`SnapshotError`] saying what is damaged.
    fn restore(bytes: &[u8]) -> std::result::Result<Self, SnapshotError>;

    /// The highest log index the state itself records (a log index kept
    /// in a record: a report's, a remembered request's), 0 when it records
    /// none. A state taken at log index `I` records none above `I`: a
    /// restore ([`crate::seed::seed_single_voter`]) refuses a backup whose
    /// header claims less.
    fn highest_recorded_index(&self) -> u64 {
        0
    }
}

/// The applied state: the machine plus what raft needs to know about it.
pub struct Applied<SM> {
    /// The user state machine.
    pub machine: SM,
    /// The last log id applied.
    pub last_applied: Option<LogId>,
    /// The last membership applied.
    pub membership: StoredMembership,
    /// Digests asked for at an index (shared by every copy of this state;
    /// a copy taken for a snapshot shares it and never applies).
    pub digests: Arc<DigestPoints<SM>>,
}

impl<SM: Clone> Clone for Applied<SM> {
    fn clone(&self) -> Self {
        Applied {
            machine: self.machine.clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            digests: self.digests.clone(),
        }
    }
}

impl<SM: Default> Default for Applied<SM> {
    fn default() -> Self {
        Applied {
            machine: SM::default(),
            last_applied: None,
            membership: StoredMembership::default(),
            digests: Arc::new(DigestPoints::default()),
        }
    }
}

impl<SM: StateMachine> Applied<SM> {
    /// Applies committed entries in order; one reply per entry, one
    /// response per command of a normal entry. Every state-machine store
    /// applies through it (the snapshot-file store here, the simulation's
    /// in-memory one), so both reach the same state from the same log.
    /// After each entry, the digest points see the state (see
    /// [`crate::digest`]).
    pub fn apply_entries(&mut self, entries: Vec<Entry>) -> Vec<Reply> {
        self.apply_entries_observed(entries, |_, _, _| {})
    }

    /// [`Applied::apply_entries`], calling `observe(index, command, state)`
    /// after each command of a normal entry with the state it left (the
    /// simulation checks the pool's invariants there, command by command,
    /// on every replica).
    pub fn apply_entries_observed(
        &mut self,
        entries: Vec<Entry>,
        mut observe: impl FnMut(u64, &[u8], &SM),
    ) -> Vec<Reply> {
        let mut replies = Vec::with_capacity(entries.len());
        for entry in entries {
            let index = entry.log_id.index;
            self.last_applied = Some(entry.log_id);
            let reply = match entry.payload {
                EntryPayload::Blank => Vec::new(),
                EntryPayload::Normal(batch) => batch
                    .0
                    .iter()
                    .map(|command| {
                        let response = self.machine.apply(index, command);
                        observe(index, command, &self.machine);
                        response
                    })
                    .collect(),
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership);
                    Vec::new()
                }
            };
            replies.push(Reply(reply));
            self.digests.applied(index, &self.machine);
        }
        replies
    }
}

/// The state-machine storage of one node. Cloning shares it.
pub struct StateMachineStore<SM> {
    /// The applied state. A std lock: critical sections are short and never
    /// await, and readers on the gRPC path must not wait for the raft task.
    /// A poisoned lock is fatal: only a panic inside `apply` (a broken
    /// invariant) can poison it, and the state it left is not trustworthy.
    state: Arc<RwLock<Applied<SM>>>,
    snapshots: Arc<SnapshotDir>,
    /// Distinguishes snapshots built at the same index.
    builds: Arc<AtomicU64>,
    /// Told the size and duration of every snapshot built or installed.
    observer: crate::observe::SharedObserver,
}

impl<SM> Clone for StateMachineStore<SM> {
    fn clone(&self) -> Self {
        StateMachineStore {
            state: self.state.clone(),
            snapshots: self.snapshots.clone(),
            builds: self.builds.clone(),
            observer: self.observer.clone(),
        }
    }
}

impl<SM: StateMachine> StateMachineStore<SM> {
    /// Opens the state machine of a data directory, loading its snapshot.
    ///
    /// # Errors
    /// [`Error::DataDir`] when the snapshot file is damaged.
    pub fn open(data_dir: &Path) -> Result<Self> {
        let snapshots = SnapshotDir::open(data_dir.join("snapshots"))?;
        let mut applied = Applied::<SM>::default();
        if let Some((meta, data)) = snapshots.load()? {
            applied.machine = SM::restore(&data).map_err(|problem| Error::DataDir {
                path: snapshots.current_path(),
                problem: format!("snapshot state cannot be decoded ({problem}); refusing to start"),
            })?;
            applied.last_applied = meta.last_log_id;
            applied.membership = meta.last_membership.clone();
        }
        Ok(StateMachineStore {
            state: Arc::new(RwLock::new(applied)),
            snapshots: Arc::new(snapshots),
            builds: Arc::new(AtomicU64::new(0)),
            observer: crate::observe::none(),
        })
    }

    /// Reports snapshot builds and installs to `observer`.
    #[must_use]
    pub fn with_observer(mut self, observer: crate::observe::SharedObserver) -> Self {
        self.observer = observer;
        self
    }

    /// Runs `f` on the applied state.
    ///
    /// # Panics
    /// When the applied state's lock is poisoned (see [`poisoned`]).
    pub fn read<T>(&self, f: impl FnOnce(&Applied<SM>) -> T) -> T {
        let guard = self.state.read().unwrap_or_else(|_| poisoned());
        f(&guard)
    }

    fn write<T>(&self, f: impl FnOnce(&mut Applied<SM>) -> T) -> T {
        let mut guard = self.state.write().unwrap_or_else(|_| poisoned());
        f(&mut guard)
    }
}

/// A poisoned lock on the applied state is fatal, never recovered: it means
/// a thread panicked while holding it, i.e. inside `apply` or a restore, and
/// the state may be half-applied. Serving or snapshotting it could spread a
/// broken state to other replicas; restart so the state is rebuilt from the
/// snapshot and the log.
fn poisoned() -> ! {
    panic!(
        "the applied state's lock is poisoned: a panic inside apply broke an invariant; \
         refusing to serve a possibly half-applied state (restart to rebuild it from the snapshot and the log)"
    )
}

impl<SM: StateMachine> RaftSnapshotBuilder<TypeConfig> for StateMachineStore<SM> {
    async fn build_snapshot(&mut self) -> std::result::Result<Snapshot, StorageError<u64>> {
        // Copy under the lock; encode and write outside it, so apply goes on.
        let applied = self.read(|a| a.clone());
        let build = self.builds.fetch_add(1, Ordering::Relaxed);
        let snapshots = self.snapshots.clone();
        let started = std::time::Instant::now();
        let span = tracing::info_span!("build_snapshot", last_applied = ?applied.last_applied.map(|l| l.index));
        let (meta, data) = tokio::task::spawn_blocking(move || {
            let data = applied.machine.snapshot();
            let snapshot_id = match applied.last_applied {
                Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, build),
                None => format!("0-0-{build}"),
            };
            let meta = SnapshotMeta {
                last_log_id: applied.last_applied,
                last_membership: applied.membership,
                snapshot_id,
            };
            snapshots.store(&meta, &data).map(|()| (meta, data))
        })
        .instrument(span.clone())
        .await
        .map_err(|e| StorageIOError::write_snapshot(None, &std::io::Error::other(e.to_string())))?
        .map_err(|e| StorageIOError::write_snapshot(None, &std::io::Error::other(e.to_string())))?;
        span.in_scope(|| tracing::info!(bytes = data.len(), "snapshot built"));
        self.observer
            .snapshot_built(data.len() as u64, started.elapsed());
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl<SM: StateMachine> RaftStateMachine<TypeConfig> for StateMachineStore<SM> {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> std::result::Result<(Option<LogId>, StoredMembership), StorageError<u64>> {
        Ok(self.read(|a| (a.last_applied, a.membership.clone())))
    }

    async fn apply<I>(&mut self, entries: I) -> std::result::Result<Vec<Reply>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let span = tracing::debug_span!(
            "apply_batch",
            first = entries.first().map(|e| e.log_id.index),
            last = entries.last().map(|e| e.log_id.index),
            n = entries.len()
        );
        Ok(span.in_scope(|| self.apply_entries(entries)))
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> std::result::Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> std::result::Result<(), StorageError<u64>> {
        let span = tracing::info_span!("install_snapshot", id = %meta.snapshot_id);
        let started = std::time::Instant::now();
        let data = snapshot.into_inner();
        let bytes = data.len() as u64;
        self.install(meta, data).instrument(span).await?;
        self.observer.snapshot_installed(bytes, started.elapsed());
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> std::result::Result<Option<Snapshot>, StorageError<u64>> {
        let snapshots = self.snapshots.clone();
        let loaded = tokio::task::spawn_blocking(move || snapshots.load())
            .await
            .map_err(|e| {
                StorageIOError::read_snapshot(None, &std::io::Error::other(e.to_string()))
            })?
            .map_err(|e| {
                StorageIOError::read_snapshot(None, &std::io::Error::other(e.to_string()))
            })?;
        Ok(loaded.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}

impl<SM: StateMachine> StateMachineStore<SM> {
    /// Applies committed entries in order under the lock; one reply per
    /// entry, one response per command of a normal entry.
    fn apply_entries(&self, entries: Vec<Entry>) -> Vec<Reply> {
        self.write(|applied| applied.apply_entries(entries))
    }

    /// Installs a received snapshot: the file first (the commit point),
    /// then the in-memory swap.
    async fn install(
        &self,
        meta: &SnapshotMeta,
        data: Vec<u8>,
    ) -> std::result::Result<(), StorageError<u64>> {
        let machine = SM::restore(&data).map_err(|problem| {
            StorageIOError::read_snapshot(Some(meta.signature()), &std::io::Error::other(problem))
        })?;
        let snapshots = self.snapshots.clone();
        let stored_meta = meta.clone();
        tokio::task::spawn_blocking(move || snapshots.store(&stored_meta, &data))
            .await
            .map_err(|e| {
                StorageIOError::write_snapshot(
                    Some(meta.signature()),
                    &std::io::Error::other(e.to_string()),
                )
            })?
            .map_err(|e| {
                StorageIOError::write_snapshot(
                    Some(meta.signature()),
                    &std::io::Error::other(e.to_string()),
                )
            })?;
        self.write(|applied| {
            applied.machine = machine;
            applied.last_applied = meta.last_log_id;
            applied.membership = meta.last_membership.clone();
            // Requests for an index the snapshot jumped over are told so;
            // one for its own index gets its state.
            if let Some(last) = meta.last_log_id {
                applied.digests.applied(last.index, &applied.machine);
            }
        });
        tracing::info!(last = ?meta.last_log_id.map(|l| l.index), "snapshot installed");
        Ok(())
    }
}

const MAGIC: &[u8; 8] = b"OSSNAP01";
const CURRENT: &str = "current.snap";
/// The file a snapshot is written to before it is renamed to [`CURRENT`].
const TMP: &str = "current.snap.tmp";

/// The directory holding the current snapshot file.
pub struct SnapshotDir {
    dir: PathBuf,
    /// Serializes writers of `current.snap` (a builder and an install may
    /// race) and remembers the last log id of the current file, so a store
    /// does not re-read the whole file (`None` until first needed).
    written: std::sync::Mutex<Option<Option<LogId>>>,
}

impl SnapshotDir {
    /// Opens the snapshot directory, removing temporary files of an
    /// interrupted write.
    pub fn open(dir: PathBuf) -> Result<Self> {
        crate::modes::create_private_dir_all(&dir).map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
        let entries = std::fs::read_dir(&dir).map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(SnapshotDir {
            dir,
            written: std::sync::Mutex::new(None),
        })
    }

    /// Path of the current snapshot file.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(CURRENT)
    }

    /// Writes a snapshot durably and atomically replaces the current one.
    pub fn store(&self, meta: &SnapshotMeta, data: &[u8]) -> Result<()> {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if written.is_none() {
            *written = Some(
                self.load()
                    .ok()
                    .flatten()
                    .and_then(|(current, _)| current.last_log_id),
            );
        }
        // Never replace a newer snapshot with an older one.
        if written.flatten() > meta.last_log_id {
            return Ok(());
        }
        let bytes = encode_snapshot_file(meta, data);
        // A fixed name: the snapshot id comes from the leader and never
        // becomes a path (writers are serialized by `written`).
        let tmp = self.dir.join(TMP);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        let mut file = crate::modes::create_private_file(&tmp).map_err(io(&tmp))?;
        file.write_all(&bytes).map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
        let current = self.current_path();
        std::fs::rename(&tmp, &current).map_err(io(&current))?;
        sync_dir(&self.dir)?;
        *written = Some(meta.last_log_id);
        Ok(())
    }

    /// Reads and verifies the current snapshot, if any.
    ///
    /// # Errors
    /// [`Error::DataDir`] naming the file when it is truncated or damaged.
    pub fn load(&self) -> Result<Option<(SnapshotMeta, Vec<u8>)>> {
        let path = self.current_path();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Io { path, source }),
        };
        decode_snapshot_file(&bytes)
            .map(Some)
            .map_err(|problem| Error::DataDir {
                path,
                problem: format!("{problem}; refusing to start"),
            })
    }
}

fn encode_snapshot_file(meta: &SnapshotMeta, data: &[u8]) -> Vec<u8> {
    let meta = codec::encode(meta);
    let mut out = Vec::with_capacity(8 + 4 + meta.len() + 8 + data.len() + 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes and verifies a snapshot file (format in the module doc): header,
/// checksum, and both length fields against the file's own length, before
/// anything is allocated for them. Public for the fuzz targets (`fuzz/`).
///
/// # Errors
/// What is wrong with the file, in words (the caller names the file).
pub fn decode_snapshot_file(bytes: &[u8]) -> std::result::Result<(SnapshotMeta, Vec<u8>), String> {
    if bytes.len() < 8 + 4 + 8 + 4 || &bytes[..8] != MAGIC {
        return Err("snapshot file is truncated or not a snapshot (bad header)".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let mut crc_bytes = [0u8; 4];
    crc_bytes.copy_from_slice(crc);
    if crc32fast::hash(body) != u32::from_le_bytes(crc_bytes) {
        return Err("snapshot file is truncated or damaged (checksum mismatch)".into());
    }
    let mut at = 8;
    // A length field is checked against what the file holds before it is
    // used: `at + n` cannot overflow (a crafted length near u64::MAX did, a
    // panic in debug builds; found by fuzzing) and nothing of the claimed
    // size is allocated.
    let take = |at: &mut usize, n: usize| -> std::result::Result<&[u8], String> {
        let end = at
            .checked_add(n)
            .ok_or("snapshot file is truncated (length past end)")?;
        let slice = body
            .get(*at..end)
            .ok_or("snapshot file is truncated (length past end)")?;
        *at = end;
        Ok(slice)
    };
    let mut u32b = [0u8; 4];
    u32b.copy_from_slice(take(&mut at, 4)?);
    let meta_len = u32::from_le_bytes(u32b) as usize;
    let meta: SnapshotMeta =
        codec::decode(take(&mut at, meta_len)?, "snapshot meta").map_err(|e| e.to_string())?;
    let mut u64b = [0u8; 8];
    u64b.copy_from_slice(take(&mut at, 8)?);
    let data_len =
        usize::try_from(u64::from_le_bytes(u64b)).map_err(|_| "snapshot data length overflows")?;
    let data = take(&mut at, data_len)?.to_vec();
    if at != body.len() {
        return Err("snapshot file has trailing bytes".into());
    }
    Ok((meta, data))
}
