//! The on-disk data directory of one node.
//!
//! ```text
//! <data-dir>/
//!   raft/          sled database: trees `meta` (identity, vote, committed,
//!                  last purged log id) and `log` (entries by big-endian index)
//!   snapshots/     current.snap: the latest state-machine snapshot, checksummed
//! ```
//!
//! Durability: sled's `flush` on Linux ends in `sync_file_range`, which does not
//! make the data durable across power loss (sled issue #1452). [`Durability`]
//! therefore follows every flush with `fdatasync` of the database file through a
//! separately opened handle, and only then reports the write durable. One flusher
//! thread serves every request: requests that arrive while a flush runs share the
//! next one (group commit).
//!
//! Start-up refuses, with an error naming the path, a directory that is not a
//! data directory, a database sled cannot open, a missing identity record, or an
//! identity of another cluster or node. Nothing is reset or overwritten.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use serde::{Deserialize, Serialize};

use crate::codec;
use crate::error::{Error, Result};
use crate::NodeId;

/// Storage format of the data directory written by this build.
pub const STORAGE_FORMAT_V1: u32 = 1;

/// Key of the identity record in the `meta` tree.
const IDENTITY_KEY: &[u8] = b"identity";

/// Who a data directory belongs to. Written once when the directory is created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// [`STORAGE_FORMAT_V1`].
    pub format: u32,
    /// [`codec::ENCODING_V1`].
    pub encoding: u32,
    /// The cluster this node belongs to.
    pub cluster_id: String,
    /// This node's raft id.
    pub node_id: NodeId,
}

/// An opened data directory.
pub struct DataDir {
    /// The data directory.
    pub path: PathBuf,
    /// The sled database.
    pub db: sled::Db,
    /// Identity, vote, committed, last purged.
    pub meta: sled::Tree,
    /// Log entries keyed by big-endian index.
    pub log: sled::Tree,
    /// Makes writes durable.
    pub durability: Durability,
}

impl DataDir {
    /// Opens (or, if absent or empty, creates) the data directory of node
    /// `node_id` in cluster `cluster_id`.
    ///
    /// # Errors
    /// [`Error::DataDir`] when the directory is not this node's data directory
    /// or is damaged; the error names the path and what is wrong.
    pub fn open(
        path: &Path,
        cluster_id: &str,
        node_id: NodeId,
        cache_capacity: u64,
    ) -> Result<Self> {
        let fresh = is_absent_or_empty(path)?;
        let raft_dir = path.join("raft");
        if !fresh && !raft_dir.join("db").is_file() {
            return Err(Error::DataDir {
                path: path.to_path_buf(),
                problem:
                    "is not empty but holds no raft/db: not an openshell-gateway data directory; \
                          point --data-dir at an empty directory or at this node's own data"
                        .into(),
            });
        }
        std::fs::create_dir_all(&raft_dir).map_err(|source| Error::Io {
            path: raft_dir.clone(),
            source,
        })?;
        std::fs::create_dir_all(path.join("snapshots")).map_err(|source| Error::Io {
            path: path.join("snapshots"),
            source,
        })?;

        let db = open_sled(&raft_dir, cache_capacity)?;
        let sled_err = |source| Error::Sled {
            path: raft_dir.clone(),
            source,
        };
        let meta = db.open_tree("meta").map_err(sled_err)?;
        let log = db.open_tree("log").map_err(sled_err)?;
        let db_file_path = raft_dir.join("db");
        let db_file = File::open(&db_file_path).map_err(|source| Error::Io {
            path: db_file_path.clone(),
            source,
        })?;
        let durability = Durability::start(db.clone(), db_file);

        let expected = Identity {
            format: STORAGE_FORMAT_V1,
            encoding: codec::ENCODING_V1,
            cluster_id: cluster_id.to_string(),
            node_id,
        };
        match meta.get(IDENTITY_KEY).map_err(sled_err)? {
            None if fresh => {
                meta.insert(IDENTITY_KEY, codec::encode(&expected)).map_err(sled_err)?;
                durability.sync_blocking().map_err(|source| Error::Io { path: db_file_path.clone(), source })?;
                sync_dir(path)?;
                sync_dir(&raft_dir)?;
            }
            None => {
                return Err(Error::DataDir {
                    path: raft_dir,
                    problem: "has no identity record: the database is damaged or was not written by \
                              openshell-gateway; refusing to start (restore it from a backup or remove \
                              the node and re-add it with an empty directory)"
                        .into(),
                })
            }
            Some(bytes) => {
                let found: Identity = codec::decode(&bytes, "identity record").map_err(|e| Error::DataDir {
                    path: raft_dir.clone(),
                    problem: format!("identity record is damaged ({e}); refusing to start"),
                })?;
                check_identity(&raft_dir, &found, &expected)?;
            }
        }
        Ok(DataDir {
            path: path.to_path_buf(),
            db,
            meta,
            log,
            durability,
        })
    }
}

fn check_identity(path: &Path, found: &Identity, expected: &Identity) -> Result<()> {
    let problem = if found.format != expected.format {
        format!(
            "storage format {} is not supported by this build (it reads format {})",
            found.format, expected.format
        )
    } else if found.encoding != expected.encoding {
        format!(
            "encoding {} is not supported by this build (it reads encoding {})",
            found.encoding, expected.encoding
        )
    } else if found.cluster_id != expected.cluster_id {
        format!(
            "belongs to cluster {:?}, but this node is configured for cluster {:?}; refusing to start \
             (check --cluster-id and --data-dir)",
            found.cluster_id, expected.cluster_id
        )
    } else if found.node_id != expected.node_id {
        format!(
            "belongs to node {}, but this node is configured as node {}; refusing to start \
             (check --node-id and --data-dir)",
            found.node_id, expected.node_id
        )
    } else {
        return Ok(());
    };
    Err(Error::DataDir {
        path: path.to_path_buf(),
        problem,
    })
}

fn is_absent_or_empty(path: &Path) -> Result<bool> {
    match std::fs::read_dir(path) {
        Ok(mut entries) => Ok(entries.next().is_none()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => Err(Error::DataDir {
            path: path.to_path_buf(),
            problem: "is a file, not a directory".into(),
        }),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Opens sled, turning both its errors and its panics on damaged files into a
/// [`Error::DataDir`] that names the directory.
fn open_sled(dir: &Path, cache_capacity: u64) -> Result<sled::Db> {
    let config = sled::Config::new()
        .path(dir)
        .cache_capacity(cache_capacity)
        // We flush explicitly (and fdatasync after); no background flusher.
        .flush_every_ms(None)
        .mode(sled::Mode::HighThroughput);
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| config.open()));
    let damaged = |detail: String| {
        Error::DataDir {
        path: dir.to_path_buf(),
        problem: format!(
            "cannot be opened, the database is damaged or truncated ({detail}); refusing to start: \
             restore this node from a backup, or remove it from the cluster and re-add it with an empty \
             data directory"
        ),
    }
    };
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) => Err(damaged(e.to_string())),
        Err(panic) => {
            let detail = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "sled panicked".into());
            Err(damaged(detail))
        }
    }
}

/// fsyncs a directory so that entries created in it survive a crash.
pub fn sync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
}

/// A callback the flusher thread calls with the result of a flush that started
/// after the callback was queued.
type FlushCallback = Box<dyn FnOnce(io::Result<()>) + Send>;

/// Makes the sled database durable: `flush` then `fdatasync`, on one thread,
/// with group commit. Cloning shares the thread.
#[derive(Clone)]
pub struct Durability {
    tx: mpsc::Sender<FlushCallback>,
}

impl Durability {
    fn start(db: sled::Db, db_file: File) -> Self {
        let (tx, rx) = mpsc::channel::<FlushCallback>();
        let spawned = std::thread::Builder::new()
            .name("raft-flusher".into())
            .spawn(move || {
                // Ends when every sender is dropped.
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    let span = tracing::trace_span!("durable_flush", requests = batch.len());
                    let _enter = span.enter();
                    let result = db
                        .flush()
                        .map_err(io::Error::other)
                        .and_then(|_| db_file.sync_data());
                    for done in batch {
                        done(match &result {
                            Ok(()) => Ok(()),
                            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                        });
                    }
                }
            });
        if let Err(e) = spawned {
            // Without the thread no write could become durable; that is fatal.
            panic!("cannot spawn the raft flusher thread: {e}");
        }
        Durability { tx }
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
