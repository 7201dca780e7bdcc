//! openraft's state-machine storage for a simulated node: the applied state
//! in memory (as on a gateway), snapshots on the simulated [`Disk`]
//! (durable at once, like the synced and renamed snapshot file).
//!
//! Entries apply through `raft_store::state_machine::Applied::apply_entries`,
//! the very function the gateway's store applies with. Every applied entry
//! goes into the run's [`Trace`]: its log id and the hash of its replies.

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::RaftStateMachine;
use openraft::{RaftSnapshotBuilder, StorageError, StorageIOError};
use raft_store::state_machine::Applied;
use raft_store::types::typ::{Entry, LogId, Snapshot, SnapshotMeta, StoredMembership};
use raft_store::types::Reply;
use raft_store::{NodeMachine, SnapshotError, StateMachine, TypeConfig};

use crate::disk::Disk;
use crate::invariants::Check;
use crate::trace::Trace;

/// The state-machine storage of one simulated node. Cloning shares it.
pub struct MemMachine<SM> {
    state: Arc<Mutex<Applied<SM>>>,
    disk: Disk,
    /// Distinguishes snapshots built at the same index.
    builds: Arc<AtomicU64>,
    /// Where applies are recorded, with this node's name.
    trace: Option<(Trace, Arc<str>)>,
    /// What checks every applied command.
    check: Option<Arc<Mutex<dyn Check<SM>>>>,
}

impl<SM> Clone for MemMachine<SM> {
    fn clone(&self) -> Self {
        MemMachine {
            state: self.state.clone(),
            disk: self.disk.clone(),
            builds: self.builds.clone(),
            trace: self.trace.clone(),
            check: self.check.clone(),
        }
    }
}

impl<SM: StateMachine> MemMachine<SM> {
    /// The state machine of `disk`, restored from its snapshot if it has one.
    ///
    /// # Errors
    /// [`SnapshotError`] when the snapshot does not decode.
    pub fn open(disk: Disk) -> Result<Self, SnapshotError> {
        let mut applied = Applied::<SM>::default();
        if let Some((meta, data)) = disk.read(|image| image.snapshot.clone()) {
            applied.machine = SM::restore(&data)?;
            applied.last_applied = meta.last_log_id;
            applied.membership = meta.last_membership;
        }
        Ok(MemMachine {
            state: Arc::new(Mutex::new(applied)),
            disk,
            builds: Arc::new(AtomicU64::new(0)),
            trace: None,
            check: None,
        })
    }

    /// Records every applied entry in `trace` as node `name`.
    #[must_use]
    pub fn traced(mut self, trace: Trace, name: &str) -> Self {
        self.trace = Some((trace, name.into()));
        self
    }

    /// Calls `check` after every applied command (and, from now on, at
    /// every snapshot installed).
    #[must_use]
    pub fn checked(mut self, check: impl Check<SM>) -> Self {
        let check: Arc<Mutex<dyn Check<SM>>> = Arc::new(Mutex::new(check));
        lock(&check).restored(&self.state().machine);
        self.check = Some(check);
        self
    }

    /// One thread runs the simulation; a poisoned lock means a panic inside
    /// apply, which already failed the run.
    fn state(&self) -> MutexGuard<'_, Applied<SM>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn snapshot_error(e: impl ToString) -> StorageError<u64> {
    StorageIOError::read_snapshot(None, &std::io::Error::other(e.to_string())).into()
}

impl<SM: StateMachine> RaftSnapshotBuilder<TypeConfig> for MemMachine<SM> {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError<u64>> {
        let applied = self.state().clone();
        let build = self.builds.fetch_add(1, Ordering::Relaxed);
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
        self.disk.store_snapshot(meta.clone(), data.clone());
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl<SM: StateMachine> RaftStateMachine<TypeConfig> for MemMachine<SM> {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembership), StorageError<u64>> {
        let state = self.state();
        Ok((state.last_applied, state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Reply>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let ids: Vec<LogId> = entries.iter().map(|e| e.log_id).collect();
        let replies = match &self.check {
            Some(check) => {
                let mut check = lock(check);
                self.state()
                    .apply_entries_observed(entries, |index, command, machine| {
                        check.applied(index, command, machine)
                    })
            }
            None => self.state().apply_entries(entries),
        };
        if let Some((trace, name)) = &self.trace {
            for (id, reply) in ids.iter().zip(&replies) {
                let bytes: Vec<u8> = reply.0.concat();
                trace.record(
                    format!(
                        "{name} apply {}-{} {}B",
                        id.leader_id.term,
                        id.index,
                        bytes.len()
                    ),
                    &bytes,
                );
            }
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let data = snapshot.into_inner();
        let machine = SM::restore(&data).map_err(snapshot_error)?;
        self.disk.store_snapshot(meta.clone(), data);
        let mut state = self.state();
        if let Some(check) = &self.check {
            lock(check).restored(&machine);
        }
        state.machine = machine;
        state.last_applied = meta.last_log_id;
        state.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError<u64>> {
        Ok(self
            .disk
            .read(|image| image.snapshot.clone())
            .map(|(meta, data)| Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(data)),
            }))
    }
}

impl<SM: StateMachine> NodeMachine<SM> for MemMachine<SM> {
    fn read<T>(&self, f: impl FnOnce(&Applied<SM>) -> T) -> T {
        f(&self.state())
    }
}
