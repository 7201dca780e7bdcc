//! [`Durability`]: the one flusher thread that makes the sled database
//! durable, with group commit: sled's `flush` (which ends in
//! `sync_file_range`, not durable across power loss: sled issue #1452), then
//! `fdatasync` of every blob file sled wrote and of the database file, and
//! only then the callbacks of every request that arrived before the flush.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Instant;

use crate::observe::SharedObserver;

use crate::watermark::Watermark;

/// Makes every blob file sled wrote durable, and the directory entries that
/// name them. Blob files never change once written, so each is synced once;
/// `synced` remembers which (and forgets those sled has removed).
///
/// # Errors
/// The first file or directory that cannot be read or synced.
fn sync_blobs(raft_dir: &Path, synced: &mut BTreeSet<OsString>) -> io::Result<()> {
    let blobs = raft_dir.join("blobs");
    let entries = match std::fs::read_dir(&blobs) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            synced.clear();
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let mut present = BTreeSet::new();
    let mut new = 0usize;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if !synced.contains(&name) {
            File::open(entry.path())?.sync_data()?;
            new += 1;
        }
        present.insert(name);
    }
    if new > 0 {
        tracing::warn!(
            files = new,
            dir = %blobs.display(),
            "sled wrote blob files (pages over its blob threshold); synced them before acknowledging"
        );
        File::open(&blobs)?.sync_all()?;
        File::open(raft_dir)?.sync_all()?;
    }
    *synced = present;
    Ok(())
}

/// A callback the flusher thread calls with the result of a flush that started
/// after the callback was queued.
type FlushCallback = Box<dyn FnOnce(io::Result<()>) + Send>;

/// Makes the sled database durable: `flush` then `fdatasync`, on one thread,
/// with group commit. Cloning shares the thread.
#[derive(Clone)]
pub struct Durability {
    tx: mpsc::Sender<FlushCallback>,
    /// Told the duration of every group commit, once the node sets it
    /// ([`Durability::observe_with`]); the data directory is opened before
    /// the node's observer is known (offline tools have none).
    observer: Arc<OnceLock<SharedObserver>>,
}

impl Durability {
    pub(crate) fn start(
        db: sled::Db,
        raft_dir: PathBuf,
        db_file: File,
        watermark: Arc<Watermark>,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<FlushCallback>();
        let observer: Arc<OnceLock<SharedObserver>> = Arc::default();
        let observed = observer.clone();
        let spawned = std::thread::Builder::new()
            .name("raft-flusher".into())
            .spawn(move || {
                let mut synced_blobs = BTreeSet::new();
                // Ends when every sender is dropped.
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    let span = tracing::trace_span!("durable_flush", requests = batch.len());
                    // A plain thread that never awaits: the guard is safe.
                    let _enter = span.enter();
                    let captured = watermark.current();
                    let started = Instant::now();
                    // Blob files first: the database file points at them.
                    let result = db
                        .flush()
                        .map_err(io::Error::other)
                        .and_then(|_| sync_blobs(&raft_dir, &mut synced_blobs))
                        .and_then(|()| db_file.sync_data());
                    if let Some(o) = observed.get() {
                        o.log_synced(batch.len(), started.elapsed(), result.is_ok());
                    }
                    for done in batch {
                        done(match &result {
                            Ok(()) => Ok(()),
                            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                        });
                    }
                    // After the callbacks: the watermark may only understate
                    // what is durable, so it never delays a commit.
                    if result.is_ok() {
                        if let Err(e) = watermark.flushed(captured) {
                            tracing::warn!(error = %e, "cannot update the watermark file");
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            // Without the thread no write could become durable; that is fatal.
            panic!("cannot spawn the raft flusher thread: {e}");
        }
        Durability { tx, observer }
    }

    /// Reports every group commit from now on to `observer` (the first
    /// call wins; later ones are ignored).
    pub fn observe_with(&self, observer: SharedObserver) {
        let _ = self.observer.set(observer);
    }

    /// Returns once everything written before the call is durable.
    pub async fn sync(&self) -> io::Result<()> {
        let (reply, wait) = tokio::sync::oneshot::channel();
        self.sync_then(move |result| {
            let _ = reply.send(result);
        });
        wait.await
            .map_err(|_| io::Error::other("the flusher thread is gone"))?
    }

    /// Like [`Durability::sync`], for synchronous callers.
    pub fn sync_blocking(&self) -> io::Result<()> {
        let (reply, wait) = mpsc::channel();
        self.sync_then(move |result| {
            let _ = reply.send(result);
        });
        wait.recv()
            .map_err(|_| io::Error::other("the flusher thread is gone"))?
    }

    /// Calls `done` once everything written before the call is durable,
    /// without waiting for it.
    pub fn sync_then(&self, done: impl FnOnce(io::Result<()>) + Send + 'static) {
        if let Err(mpsc::SendError(done)) = self.tx.send(Box::new(done)) {
            done(Err(io::Error::other("the flusher thread is gone")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(set: &BTreeSet<OsString>) -> Vec<String> {
        set.iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect()
    }

    /// The flusher syncs each blob file sled leaves, once, and forgets
    /// those sled removed; no `blobs/` directory is nothing to do.
    #[test]
    fn blob_files_are_synced_once_and_forgotten_when_removed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut synced = BTreeSet::new();
        sync_blobs(tmp.path(), &mut synced).expect("no blobs dir");
        assert!(synced.is_empty());

        let blobs = tmp.path().join("blobs");
        std::fs::create_dir(&blobs).expect("blobs dir");
        std::fs::write(blobs.join("100"), b"a").expect("blob 100");
        std::fs::write(blobs.join("200"), b"b").expect("blob 200");
        sync_blobs(tmp.path(), &mut synced).expect("sync");
        assert_eq!(names(&synced), ["100", "200"]);

        std::fs::remove_file(blobs.join("100")).expect("remove 100");
        std::fs::write(blobs.join("300"), b"c").expect("blob 300");
        sync_blobs(tmp.path(), &mut synced).expect("sync again");
        assert_eq!(names(&synced), ["200", "300"]);
    }
}
