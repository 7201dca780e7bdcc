//! Backup files: a consistent snapshot of the replicated state with the log
//! position it reflects. `openshell-pool backup save` writes them (from a
//! `ClusterAdmin.BackupStream`, chunk by chunk through [`BackupWriter`], or
//! a deprecated `ClusterAdmin.Backup` reply through [`write`]) and
//! `openshell-gateway restore` reads them ([`read`], over [`decode`]), so
//! the format lives here, beside the messages it carries. No size cap: a
//! state of any size is saved with memory bounded by one chunk.
//!
//! ```text
//! OSBACKUP1\n
//! {"cluster_id":"...","term":T,"index":I,"bytes":N,"crc32":C,"taken_by_node":K}\n
//! <N bytes: the state machine snapshot encoding (openshell.gateway.v1.LogSnapshot)>
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

const MAGIC: &[u8] = b"OSBACKUP1\n";

/// Largest `data` of one `BackupChunk` a gateway sends, in bytes.
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// Longest header line [`decode`] accepts (a real one is about 150 bytes).
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The header line of a backup file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupHeader {
    /// The cluster it was taken from.
    pub cluster_id: String,
    /// Term of the last applied entry.
    pub term: u64,
    /// Index of the last applied entry: the state reflects the log up to it.
    pub index: u64,
    /// Length of the state.
    pub bytes: u64,
    /// crc32 of the state.
    pub crc32: u32,
    /// The gateway that took it.
    pub taken_by_node: u64,
}

impl BackupHeader {
    /// The header of `state` as taken by `taken_by_node` at `term`/`index`
    /// of `cluster_id`: its length and crc32 are computed here.
    pub fn for_state(
        cluster_id: String,
        term: u64,
        index: u64,
        taken_by_node: u64,
        state: &[u8],
    ) -> Self {
        BackupHeader {
            cluster_id,
            term,
            index,
            bytes: state.len() as u64,
            crc32: crc32fast::hash(state),
            taken_by_node,
        }
    }
}

/// A backup file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("backup file {path}: {problem}")]
pub struct BackupError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub problem: String,
}

/// Writes a backup file (to a temporary name, then renamed).
///
/// # Errors
/// When the file cannot be written.
pub fn write(path: &Path, header: &BackupHeader, state: &[u8]) -> Result<(), BackupError> {
    let err = |e: std::io::Error| BackupError {
        path: path.display().to_string(),
        problem: e.to_string(),
    };
    let mut out = MAGIC.to_vec();
    let json = serde_json::to_vec(header).map_err(|e| BackupError {
        path: path.display().to_string(),
        problem: e.to_string(),
    })?;
    out.extend_from_slice(&json);
    out.push(b'\n');
    out.extend_from_slice(state);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, &out).map_err(err)?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// Reads and verifies a backup file (of any size).
///
/// # Errors
/// When it cannot be read, is not a backup, is truncated, or its checksum
/// does not match.
pub fn read(path: &Path) -> Result<(BackupHeader, Vec<u8>), BackupError> {
    let bytes = std::fs::read(path).map_err(|e| BackupError {
        path: path.display().to_string(),
        problem: e.to_string(),
    })?;
    decode(&bytes).map_err(|mut e| {
        e.path = path.display().to_string();
        e
    })
}

/// Decodes and verifies the bytes of a backup file; the error's `path` is
/// `<memory>` ([`read`] names the file).
///
/// # Errors
/// When `bytes` is not a backup, is truncated or has trailing bytes, or its
/// checksum does not match.
pub fn decode(bytes: &[u8]) -> Result<(BackupHeader, Vec<u8>), BackupError> {
    let bad = |problem: String| BackupError {
        path: "<memory>".into(),
        problem,
    };
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("not an openshell backup (bad magic)".into()))?;
    let newline = rest
        .iter()
        .take(MAX_HEADER_BYTES)
        .position(|b| *b == b'\n')
        .ok_or_else(|| bad("truncated or oversized header".into()))?;
    let header: BackupHeader = serde_json::from_slice(&rest[..newline])
        .map_err(|e| bad(format!("damaged header: {e}")))?;
    let state = &rest[newline + 1..];
    if state.len() as u64 != header.bytes {
        return Err(bad(format!(
            "truncated: {} of {} state bytes",
            state.len(),
            header.bytes
        )));
    }
    if crc32fast::hash(state) != header.crc32 {
        return Err(bad("checksum mismatch: the file is damaged".into()));
    }
    Ok((header, state.to_vec()))
}

/// Writes a backup file as its state arrives: [`BackupWriter::create`]
/// with the header (length and crc32 announced up front), [`append`] each
/// chunk, then [`finish`], which checks the length and crc32 of what came,
/// fsyncs, and renames the temporary file to its name. Dropped unfinished,
/// it removes the temporary file. Memory: one chunk.
///
/// [`append`]: BackupWriter::append
/// [`finish`]: BackupWriter::finish
pub struct BackupWriter {
    /// The file's final name.
    path: PathBuf,
    /// The temporary file being written (`<path>.tmp`).
    tmp: PathBuf,
    /// Open on `tmp`; `None` once finished.
    file: Option<std::io::BufWriter<std::fs::File>>,
    /// The announced header.
    header: BackupHeader,
    /// State bytes written so far.
    written: u64,
    /// crc32 of the state bytes written so far.
    crc: crc32fast::Hasher,
}

impl BackupWriter {
    /// Starts `path` (as `<path>.tmp`) with `header`.
    ///
    /// # Errors
    /// When the temporary file cannot be created or written.
    pub fn create(path: &Path, header: BackupHeader) -> Result<Self, BackupError> {
        let tmp = path.with_extension("tmp");
        let mut writer = BackupWriter {
            path: path.to_path_buf(),
            file: None,
            tmp,
            header,
            written: 0,
            crc: crc32fast::Hasher::new(),
        };
        let file = std::fs::File::create(&writer.tmp).map_err(|e| writer.err(e.to_string()))?;
        let mut file = std::io::BufWriter::new(file);
        let json = serde_json::to_vec(&writer.header).map_err(|e| writer.err(e.to_string()))?;
        file.write_all(MAGIC)
            .and_then(|()| file.write_all(&json))
            .and_then(|()| file.write_all(b"\n"))
            .map_err(|e| writer.err(e.to_string()))?;
        writer.file = Some(file);
        Ok(writer)
    }

    /// Appends the next part of the state.
    ///
    /// # Errors
    /// When it cannot be written, or more bytes come than announced.
    pub fn append(&mut self, data: &[u8]) -> Result<(), BackupError> {
        self.written += data.len() as u64;
        if self.written > self.header.bytes {
            return Err(self.err(format!(
                "the gateway sent more than the {} state bytes it announced",
                self.header.bytes
            )));
        }
        self.crc.update(data);
        let result = match self.file.as_mut() {
            Some(file) => file.write_all(data),
            None => Err(std::io::Error::other("already finished")),
        };
        result.map_err(|e| self.err(e.to_string()))
    }

    /// Checks length and crc32, fsyncs and renames the file into place.
    ///
    /// # Errors
    /// When the state is short or damaged (the file is removed), or the
    /// file cannot be synced or renamed.
    pub fn finish(mut self) -> Result<BackupHeader, BackupError> {
        if self.written != self.header.bytes {
            return Err(self.err(format!(
                "truncated: {} of {} state bytes arrived",
                self.written, self.header.bytes
            )));
        }
        if self.crc.clone().finalize() != self.header.crc32 {
            return Err(self.err("checksum mismatch: the state arrived damaged".into()));
        }
        let file = self.file.take();
        let synced = file
            .ok_or_else(|| std::io::Error::other("already finished"))
            .and_then(|f| f.into_inner().map_err(|e| e.into_error()))
            .and_then(|f| f.sync_all())
            .and_then(|()| std::fs::rename(&self.tmp, &self.path));
        synced.map_err(|e| self.err(e.to_string()))?;
        Ok(self.header.clone())
    }

    fn err(&self, problem: String) -> BackupError {
        BackupError {
            path: self.path.display().to_string(),
            problem,
        }
    }
}

impl Drop for BackupWriter {
    /// An unfinished backup leaves no temporary file behind.
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(state: &[u8]) -> BackupHeader {
        BackupHeader::for_state("c".into(), 2, 9, 1, state)
    }

    #[test]
    fn a_streamed_file_reads_as_written_in_one_piece() -> Result<(), BackupError> {
        let dir = tempfile::tempdir().map_err(|e| BackupError {
            path: "tmp".into(),
            problem: e.to_string(),
        })?;
        let state: Vec<u8> = (0..3 * CHUNK_BYTES + 7).map(|i| (i % 251) as u8).collect();
        let streamed = dir.path().join("streamed.bak");
        let mut writer = BackupWriter::create(&streamed, header(&state))?;
        for chunk in state.chunks(CHUNK_BYTES) {
            writer.append(chunk)?;
        }
        writer.finish()?;
        let whole = dir.path().join("whole.bak");
        write(&whole, &header(&state), &state)?;
        assert_eq!(std::fs::read(&streamed).ok(), std::fs::read(&whole).ok());
        assert_eq!(read(&streamed)?, (header(&state), state));
        Ok(())
    }

    #[test]
    fn a_short_or_damaged_stream_leaves_no_file() -> Result<(), BackupError> {
        let dir = tempfile::tempdir().map_err(|e| BackupError {
            path: "tmp".into(),
            problem: e.to_string(),
        })?;
        let path = dir.path().join("b.bak");
        let mut writer = BackupWriter::create(&path, header(b"abcdef"))?;
        writer.append(b"abc")?;
        assert!(writer.finish().is_err());
        let mut writer = BackupWriter::create(&path, header(b"abcdef"))?;
        writer.append(b"abcdeX")?;
        assert!(writer.finish().is_err());
        let mut writer = BackupWriter::create(&path, header(b"abc"))?;
        assert!(writer.append(b"abcd").is_err());
        drop(writer);
        assert!(!path.exists() && !path.with_extension("tmp").exists());
        Ok(())
    }

    #[test]
    fn garbage_does_not_decode() {
        for bytes in [&b""[..], b"OSBACKUP1\n", b"OSBACKUP1\n{}\n", b"nope"] {
            assert!(decode(bytes).is_err());
        }
        let mut good = MAGIC.to_vec();
        let h = header(b"xy");
        good.extend(serde_json::to_vec(&h).unwrap_or_default());
        good.push(b'\n');
        good.extend(b"xy");
        assert!(decode(&good).is_ok());
        good.push(b'!');
        assert!(decode(&good).is_err(), "trailing bytes");
    }
}
