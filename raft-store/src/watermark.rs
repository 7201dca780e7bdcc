//! The watermark file (`raft.hwm`): the log and vote a database is known to
//! hold durably, recorded outside sled after each durable flush, so that a
//! database sled silently cut short on open is detected (see `crate::db`).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};

/// Name of the watermark file in the data directory.
pub const WATERMARK_FILE: &str = "raft.hwm";

/// The log and vote a database is known to hold durably.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    /// Last durable log index.
    pub last_index: u64,
    /// Term of the last durable vote.
    pub vote_term: u64,
}

/// A small file outside sled recording [`Marks`] after each durable flush, so
/// that a database sled silently cut short on open is detected.
///
/// It is written without fsync: after a power loss it may be older (lower)
/// than the database, which never causes a false alarm; after a process crash
/// the page cache keeps it exact. `truncate` lowers it before the database
/// changes, so it never exceeds what the database may legitimately hold.
pub struct Watermark {
    last_index: AtomicU64,
    vote_term: AtomicU64,
    /// The file. Writes happen under this lock so a lowering write is never
    /// overtaken by a stale higher one.
    file: Mutex<File>,
}

const WATERMARK_MAGIC: &[u8; 8] = b"OSHWM001";

impl Watermark {
    fn encode(marks: Marks) -> [u8; 28] {
        let mut out = [0u8; 28];
        out[..8].copy_from_slice(WATERMARK_MAGIC);
        out[8..16].copy_from_slice(&marks.last_index.to_le_bytes());
        out[16..24].copy_from_slice(&marks.vote_term.to_le_bytes());
        let crc = crc32fast::hash(&out[..24]);
        out[24..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub(crate) fn create(path: &Path) -> Result<()> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = crate::modes::create_private_file(path).map_err(io)?;
        std::io::Write::write_all(&mut file, &Self::encode(Marks::default())).map_err(io)?;
        file.sync_all().map_err(io)
    }

    pub(crate) fn read(path: &Path) -> Result<Marks> {
        let bytes = std::fs::read(path).map_err(|e| Error::DataDir {
            path: path.to_path_buf(),
            problem: format!("cannot be read ({e}): the data directory is incomplete or damaged; refusing to start"),
        })?;
        let damaged = || Error::DataDir {
            path: path.to_path_buf(),
            problem: "is damaged (bad header or checksum); refusing to start".into(),
        };
        if bytes.len() != 28 || &bytes[..8] != WATERMARK_MAGIC {
            return Err(damaged());
        }
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let mut crc = [0u8; 4];
        crc.copy_from_slice(&bytes[24..28]);
        if crc32fast::hash(&bytes[..24]) != u32::from_le_bytes(crc) {
            return Err(damaged());
        }
        Ok(Marks {
            last_index: word(8),
            vote_term: word(16),
        })
    }

    pub(crate) fn open(path: &Path, current: Marks) -> Result<Self> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|source| Error::Io {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Watermark {
            last_index: AtomicU64::new(current.last_index),
            vote_term: AtomicU64::new(current.vote_term),
            file: Mutex::new(file),
        })
    }

    /// The marks as of now (the flusher reads them before a flush).
    pub fn current(&self) -> Marks {
        Marks {
            last_index: self.last_index.load(Ordering::SeqCst),
            vote_term: self.vote_term.load(Ordering::SeqCst),
        }
    }

    /// Entries up to `index` were inserted (not yet durable).
    pub fn appended(&self, index: u64) {
        self.last_index.store(index, Ordering::SeqCst);
    }

    /// A vote of `term` was inserted (not yet durable).
    pub fn voted(&self, term: u64) {
        self.vote_term.fetch_max(term, Ordering::SeqCst);
    }

    /// The log is about to be cut back to `index`: record that now, before
    /// the database changes.
    pub fn truncating(&self, index: u64) -> io::Result<()> {
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        self.last_index.store(index, Ordering::SeqCst);
        file.write_all_at(&Self::encode(self.current()), 0)
    }

    /// A flush that started with `captured` completed.
    pub(crate) fn flushed(&self, captured: Marks) -> io::Result<()> {
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let marks = Marks {
            last_index: captured
                .last_index
                .min(self.last_index.load(Ordering::SeqCst)),
            ..captured
        };
        file.write_all_at(&Self::encode(marks), 0)
    }
}
