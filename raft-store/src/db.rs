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
//! therefore follows every flush with `fdatasync` of every blob file sled wrote
//! (none, with the entry bounds of `crate::batcher` and [`SEGMENT_SIZE`]) and of
//! the database file through a separately opened handle, and only then reports
//! the write durable. One flusher
//! thread serves every request: requests that arrive while a flush runs share the
//! next one (group commit).
//!
//! Start-up refuses, with an error naming the path, a directory that is not a
//! data directory, a database sled cannot open, a missing identity record, or an
//! identity of another cluster or node. Nothing is reset or overwritten.
//!
//! Before any of that, [`refuse_if_in_use`] refuses a directory whose database
//! another process holds open (sled takes an exclusive `flock` on `raft/db`):
//! [`Error::InUse`], naming the path and, when `/proc/locks` says, the pid.
//! Every opener (the node, the offline tools, the local status view) calls it
//! first, so a second process on the same volume changes nothing and is never
//! told the healthy data is damaged.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::codec;
use crate::error::{Error, Result};
use crate::modes;
use crate::types::NodeId;

pub use crate::durability::Durability;
pub use crate::watermark::{Marks, Watermark, WATERMARK_FILE};

/// Storage format of the data directory written by this build.
pub const STORAGE_FORMAT_V1: u32 = 1;

/// Key of the identity record in the `meta` tree.
pub(crate) const IDENTITY_KEY: &[u8] = b"identity";

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
    /// What the database is known to hold durably.
    pub watermark: Arc<Watermark>,
}

impl DataDir {
    /// Opens (or, if absent or empty, creates) the data directory of node
    /// `node_id` in cluster `cluster_id`.
    ///
    /// An existing directory is verified first on a scratch copy of its
    /// database (sled repairs a damaged file in place when it opens it, which
    /// would silently drop acknowledged entries): the copy must open, carry
    /// this node's identity, and hold at least the log and vote recorded in
    /// the watermark file. Only then is the real database opened.
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
        refuse_if_in_use(path)?;
        let fresh = is_absent_or_empty(path)?;
        let raft_dir = path.join("raft");
        let watermark_path = path.join(WATERMARK_FILE);
        if !fresh && !raft_dir.join("db").is_file() {
            return Err(Error::DataDir {
                path: path.to_path_buf(),
                problem:
                    "is not empty but holds no raft/db: not an openshell-gateway data directory; \
                          point --data-dir at an empty directory or at this node's own data"
                        .into(),
            });
        }
        let expected = Identity {
            format: STORAGE_FORMAT_V1,
            encoding: codec::ENCODING_V1,
            cluster_id: cluster_id.to_string(),
            node_id,
        };
        let private_dir = |p: &Path| {
            modes::create_private_dir_all(p).map_err(|source| Error::Io {
                path: p.to_path_buf(),
                source,
            })
        };
        if fresh {
            private_dir(path)?;
            // An empty directory made beforehand keeps its mode.
            modes::warn_if_open(path);
            Watermark::create(&watermark_path)?;
        } else {
            modes::warn_if_open(path);
            let recorded = Watermark::read(&watermark_path)?;
            verify_on_copy(path, &expected, recorded, cache_capacity)?;
        }
        private_dir(&raft_dir)?;
        private_dir(&path.join("snapshots"))?;

        let db = open_sled(&raft_dir, cache_capacity)?;
        restrict_owned(path)?;
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
        let marks = durable_marks(&raft_dir, &meta, &log)?;
        let watermark = Arc::new(Watermark::open(&watermark_path, marks)?);
        let durability =
            Durability::start(db.clone(), raft_dir.clone(), db_file, watermark.clone());

        match meta.get(IDENTITY_KEY).map_err(sled_err)? {
            None if fresh => {
                meta.insert(IDENTITY_KEY, codec::encode(&expected))
                    .map_err(sled_err)?;
                durability.sync_blocking().map_err(|source| Error::Io {
                    path: db_file_path.clone(),
                    source,
                })?;
                sync_dir(path)?;
                sync_dir(&raft_dir)?;
            }
            None => return Err(no_identity(&raft_dir)),
            Some(bytes) => check_identity(&raft_dir, &bytes, &expected)?,
        }
        Ok(DataDir {
            path: path.to_path_buf(),
            db,
            meta,
            log,
            durability,
            watermark,
        })
    }
}

/// Refuses a data directory whose sled database another process holds open.
///
/// Probes sled's lock on `<path>/raft/db` with a non-blocking shared `flock`
/// on a read-only handle, released at once: it conflicts only with a holder's
/// exclusive lock (a running node, an offline tool), never with another
/// probe, and it writes nothing. An absent database is not in use. A lock
/// still held after [`IN_USE_PATIENCE`] counts: a holder that is just
/// closing the database (a process exiting, or this process's own flusher
/// thread after a `DataDir` was dropped) gets that long to release it.
///
/// # Errors
/// [`Error::InUse`] naming the directory (and the holder's pid when
/// `/proc/locks` names it); [`Error::Io`] when the file cannot be opened.
pub fn refuse_if_in_use(path: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let db_file = path.join("raft").join("db");
    let file = match File::open(&db_file) {
        Ok(file) => file,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(())
        }
        Err(source) => {
            return Err(Error::Io {
                path: db_file,
                source,
            })
        }
    };
    let give_up = std::time::Instant::now() + IN_USE_PATIENCE;
    loop {
        // SAFETY: flock on a file descriptor this function owns for the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
        if rc == 0 {
            // Closing `file` (dropped here) releases the probe's lock.
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(Error::Io {
                path: db_file,
                source: error,
            });
        }
        if std::time::Instant::now() >= give_up {
            return Err(Error::InUse {
                path: path.to_path_buf(),
                holder: lock_holder(&file),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// How long [`refuse_if_in_use`] waits for a held lock to be released.
pub const IN_USE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// The pid `/proc/locks` names as holding a `flock` on `file`, if any.
fn lock_holder(file: &File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    // The Linux dev_t encoding (glibc's gnu_dev_major / gnu_dev_minor).
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let wanted = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; blocked waiters
    // have a "->" field and are skipped.
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            // A holder outside this pid namespace shows as pid 0: unknown.
            [_, "FLOCK", _, "WRITE", pid, inode, ..] if *inode == wanted => {
                pid.parse().ok().filter(|pid| *pid > 0)
            }
            _ => None,
        }
    })
}

fn no_identity(raft_dir: &Path) -> Error {
    Error::DataDir {
        path: raft_dir.to_path_buf(),
        problem: "has no identity record: the database is damaged or was not written by openshell-gateway; \
                  refusing to start (restore it from a backup, or remove the node from the cluster and re-add \
                  it with an empty directory)"
            .into(),
    }
}

/// Opens a scratch copy of the database and checks identity and watermark,
/// leaving the original untouched whatever the outcome.
fn verify_on_copy(
    path: &Path,
    expected: &Identity,
    recorded: Marks,
    cache_capacity: u64,
) -> Result<()> {
    let raft_dir = path.join("raft");
    let copy = path.join("raft.verify");
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Io { path: p, source }
    };
    if copy.exists() {
        std::fs::remove_dir_all(&copy).map_err(io(&copy))?;
    }
    copy_dir(&raft_dir, &copy).map_err(io(&copy))?;
    let outcome = (|| -> Result<()> {
        let db = open_sled(&copy, cache_capacity.min(16 * 1024 * 1024))
            .map_err(|e| rename_path(e, &raft_dir))?;
        let sled_err = |source| Error::Sled {
            path: raft_dir.clone(),
            source,
        };
        let meta = db.open_tree("meta").map_err(sled_err)?;
        let log = db.open_tree("log").map_err(sled_err)?;
        match meta.get(IDENTITY_KEY).map_err(sled_err)? {
            None => return Err(no_identity(&raft_dir)),
            Some(bytes) => check_identity(&raft_dir, &bytes, expected)?,
        }
        // Read every record once: sled checks each page's checksum as it
        // loads it, so damage anywhere in the live data surfaces here.
        for tree in [&meta, &log] {
            for item in tree.iter() {
                item.map_err(|e| Error::DataDir {
                    path: raft_dir.clone(),
                    problem: format!("is damaged ({e}); refusing to start"),
                })?;
            }
        }
        check_contiguous(&raft_dir, &meta, &log)?;
        let found = durable_marks(&raft_dir, &meta, &log)?;
        if found.last_index < recorded.last_index || found.vote_term < recorded.vote_term {
            return Err(Error::DataDir {
                path: raft_dir.clone(),
                problem: format!(
                    "is damaged or truncated: it holds the log up to index {} and a vote of term {}, but the log \
                     up to index {} and a vote of term {} were durable before (recorded in {}); refusing to start \
                     rather than lose acknowledged entries (restore this node from a backup, or remove it from \
                     the cluster and re-add it with an empty directory)",
                    found.last_index,
                    found.vote_term,
                    recorded.last_index,
                    recorded.vote_term,
                    path.join(WATERMARK_FILE).display()
                ),
            });
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&copy);
    outcome
}

/// Refuses a log whose entries after the purge point do not form one
/// contiguous run.
fn check_contiguous(raft_dir: &Path, meta: &sled::Tree, log: &sled::Tree) -> Result<()> {
    let purged = match meta.get(b"last_purged").map_err(|source| Error::Sled {
        path: raft_dir.to_path_buf(),
        source,
    })? {
        Some(bytes) => codec::decode::<openraft::LogId<u64>>(&bytes, "last purged log id")
            .map(|id| id.index)
            .map_err(|e| Error::DataDir {
                path: raft_dir.to_path_buf(),
                problem: format!("{e}; refusing to start"),
            })?,
        None => 0,
    };
    let mut expected: Option<u64> = None;
    for item in log.range((purged + 1).to_be_bytes()..) {
        let (key, _) = item.map_err(|source| Error::Sled {
            path: raft_dir.to_path_buf(),
            source,
        })?;
        if key.len() != 8 {
            return Err(Error::DataDir {
                path: raft_dir.to_path_buf(),
                problem: "log has a malformed key".into(),
            });
        }
        let mut buf = [0u8; 8];
        buf.copy_from_slice(&key);
        let index = u64::from_be_bytes(buf);
        if let Some(want) = expected.filter(|want| *want != index) {
            return Err(Error::DataDir {
                path: raft_dir.to_path_buf(),
                problem: format!(
                    "log has a gap: expected entry {want}, found {index}; refusing to start"
                ),
            });
        }
        expected = Some(index + 1);
    }
    Ok(())
}

/// An error about the scratch copy, reported against the original path.
fn rename_path(e: Error, original: &Path) -> Error {
    match e {
        Error::DataDir { problem, .. } => Error::DataDir {
            path: original.to_path_buf(),
            problem,
        },
        other => other,
    }
}

/// Brings what the node owns in its data directory `path` (`raft/` with
/// the files sled created under the umask, `snapshots/`, the watermark) to
/// `0700`/`0600` ([`modes`]); logs how many modes it changed.
fn restrict_owned(path: &Path) -> Result<()> {
    let mut changed = 0;
    for owned in ["raft", "snapshots", WATERMARK_FILE] {
        let owned = path.join(owned);
        changed += modes::restrict(&owned).map_err(|source| Error::Io {
            path: owned.clone(),
            source,
        })?;
    }
    if changed > 0 {
        tracing::info!(
            path = %path.display(),
            changed,
            "made the node's files private (directories 0700, files 0600)"
        );
    }
    Ok(())
}

/// Copies the directory `from` to `to` (created `0700`: a scratch copy
/// holds the whole log).
pub(crate) fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    modes::create_private_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// The last log index and vote term a database holds.
fn durable_marks(raft_dir: &Path, meta: &sled::Tree, log: &sled::Tree) -> Result<Marks> {
    let damaged = |what: String| Error::DataDir {
        path: raft_dir.to_path_buf(),
        problem: format!("{what} cannot be read; refusing to start"),
    };
    let last_entry = match log.last().map_err(|source| Error::Sled {
        path: raft_dir.to_path_buf(),
        source,
    })? {
        Some((key, _)) if key.len() == 8 => {
            let mut buf = [0u8; 8];
            buf.copy_from_slice(&key);
            u64::from_be_bytes(buf)
        }
        Some(_) => return Err(damaged("a log key".into())),
        None => 0,
    };
    let purged = match meta.get(b"last_purged").map_err(|source| Error::Sled {
        path: raft_dir.to_path_buf(),
        source,
    })? {
        Some(bytes) => {
            let id: openraft::LogId<u64> =
                codec::decode(&bytes, "last purged log id").map_err(|e| damaged(e.to_string()))?;
            id.index
        }
        None => 0,
    };
    let vote_term = match meta.get(b"vote").map_err(|source| Error::Sled {
        path: raft_dir.to_path_buf(),
        source,
    })? {
        Some(bytes) => {
            let vote: openraft::Vote<u64> =
                codec::decode(&bytes, "vote").map_err(|e| damaged(e.to_string()))?;
            vote.leader_id.term
        }
        None => 0,
    };
    Ok(Marks {
        last_index: last_entry.max(purged),
        vote_term,
    })
}

fn check_identity(path: &Path, bytes: &[u8], expected: &Identity) -> Result<()> {
    let found: Identity = codec::decode(bytes, "identity record").map_err(|e| Error::DataDir {
        path: path.to_path_buf(),
        problem: format!("identity record is damaged ({e}); refusing to start"),
    })?;
    let found = &found;
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
pub(crate) fn open_sled(dir: &Path, cache_capacity: u64) -> Result<sled::Db> {
    let config = sled::Config::new()
        .path(dir)
        .cache_capacity(cache_capacity)
        .segment_size(segment_size_of(dir))
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
        // Taken between `refuse_if_in_use` and here: in use, not damaged.
        Ok(Err(e)) if e.to_string().contains("could not acquire lock") => Err(Error::InUse {
            path: dir.parent().unwrap_or(dir).to_path_buf(),
            holder: File::open(dir.join("db"))
                .ok()
                .and_then(|f| lock_holder(&f)),
        }),
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

/// sled's segment size for databases this build creates. sled writes any
/// page over a quarter of it (minus a header) to a separate, never-synced
/// file under `blobs/`; at 8 MiB that threshold is about 2 MiB, while a leaf
/// page of the log tree holds at most 17 entries of at most 64 KiB each
/// (see `crate::batcher`), about 1.1 MiB. (sled's default, 512 KiB, gives a
/// 128 KiB threshold that two large entries already exceed.)
pub const SEGMENT_SIZE: usize = 8 * 1024 * 1024;

/// The segment size to open the sled database in `dir` with: the one it was
/// created with (sled refuses to open a database with another), else
/// [`SEGMENT_SIZE`]. A database from an earlier build keeps sled's default,
/// and the flusher's blob sync keeps it durable.
fn segment_size_of(dir: &Path) -> usize {
    // sled's `conf`: `key: value` lines followed by a 4-byte crc32.
    std::fs::read(dir.join("conf"))
        .ok()
        .and_then(|conf| {
            String::from_utf8_lossy(&conf).lines().find_map(|line| {
                line.strip_prefix("segment_size:")
                    .and_then(|v| v.trim().parse::<usize>().ok())
            })
        })
        .unwrap_or(SEGMENT_SIZE)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory whose database is open is in use, naming this process;
    /// once closed it is not, and an absent one never is.
    #[test]
    fn an_open_database_is_in_use_with_its_holder_named() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert!(refuse_if_in_use(&tmp.path().join("absent")).is_ok());
        let dir = DataDir::open(tmp.path(), "c", 1, 1024 * 1024).expect("open");
        match refuse_if_in_use(tmp.path()) {
            Err(Error::InUse { path, holder }) => {
                assert_eq!(path, tmp.path());
                assert_eq!(holder, Some(std::process::id()));
            }
            other => panic!("not in use: {other:?}"),
        }
        drop(dir);
        assert!(refuse_if_in_use(tmp.path()).is_ok(), "released on drop");
    }

    /// A database keeps the segment size it was created with (sled refuses
    /// another); a new one gets [`SEGMENT_SIZE`].
    #[test]
    fn an_existing_database_keeps_its_segment_size() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert_eq!(segment_size_of(tmp.path()), SEGMENT_SIZE);
        // A database as an earlier build made it: sled's default segment size.
        drop(sled::Config::new().path(tmp.path()).open().expect("old db"));
        assert_eq!(segment_size_of(tmp.path()), 512 * 1024);
        let db = open_sled(tmp.path(), 1024 * 1024);
        assert!(
            db.is_ok(),
            "an old database opens with its own segment size"
        );
    }
}
