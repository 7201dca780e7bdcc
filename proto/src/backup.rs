//! Backup files: a consistent snapshot of the replicated state with the log
//! position it reflects. `openshell-pool backup save` writes them (from a
//! `ClusterAdmin.BackupStream`, chunk by chunk through [`BackupWriter`]; or
//! whole through [`write`]) and `openshell-gateway restore` reads them
//! ([`read`], over [`decode`]), so the format lives here, beside the
//! messages it carries. No size cap: a state of any size is saved with
//! memory bounded by one chunk.
//!
//! Format 2 (this build writes it):
//!
//! ```text
//! OSBACKUP2\n
//! {"cluster_id":"...","term":T,"index":I,"bytes":N,"crc32":C,"taken_by_node":K}\n
//! <N bytes: the state machine snapshot encoding (openshell.gateway.v1.LogSnapshot)>
//! \nOSBACKUP2 sha256 <64 hex digits>\n
//! ```
//!
//! The trailer's SHA-256 covers every byte before it: magic, header and
//! state. [`decode`] refuses, before anything is restored: a file whose
//! length is not the one its header announces ("truncated" or "too long",
//! by how many bytes), a checksum that does not match (a header or state
//! changed or damaged), and a header field out of its range
//! ([`BackupHeader::check`]: the cluster id breaks the identifier rule, a
//! term or index of 0 or past [`MAX_LOG_POSITION`], node 0).
//!
//! Format 1 (`OSBACKUP1`, written before format 2) had no trailer: its
//! crc32 covered the state only, so an edited header went unnoticed.
//! [`read`] refuses it naming the way out; [`read_format_1`] reads one on
//! an operator's explicit request (`restore --accept-format-1`) with every
//! header field checked the same way.
//!
//! Files are created `0600` (only the owner reads a backup: it holds every
//! object and the pool's state).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The first line of a format-2 file.
const MAGIC: &[u8] = b"OSBACKUP2\n";

/// The first line of a format-1 file.
const MAGIC_V1: &[u8] = b"OSBACKUP1\n";

/// The trailer's tag; the hex SHA-256 and a newline follow it.
const TRAILER_TAG: &[u8] = b"\nOSBACKUP2 sha256 ";

/// Length of the trailer: tag, 64 hex digits, newline.
const TRAILER_LEN: usize = TRAILER_TAG.len() + 64 + 1;

/// Largest `data` of one `BackupChunk` a gateway sends, in bytes.
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// Longest header line [`decode`] accepts (a real one is about 150 bytes).
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The largest term or index a backup may carry: the log continues after
/// it (the restored node votes at term + 1 and appends at index + 1), and
/// every reader of these numbers (JSON, Prometheus) holds a signed 64-bit
/// integer.
pub const MAX_LOG_POSITION: u64 = i64::MAX as u64;

/// The header line of a backup file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

    /// Checks every field against its range: the cluster id follows the
    /// identifier rule ([`crate::ids`], as `--cluster-id` does), term and
    /// index are 1..=[`MAX_LOG_POSITION`] (a backup is taken after at least
    /// one applied entry), the taking node is not 0. Length and crc32 are
    /// checked against the state by [`decode`].
    ///
    /// # Errors
    /// What is out of range, naming the field.
    pub fn check(&self) -> Result<(), String> {
        crate::ids::check_id("cluster_id", &self.cluster_id)
            .map_err(|e| format!("header: {e} (cluster_id {:?})", self.cluster_id))?;
        for (field, value) in [("term", self.term), ("index", self.index)] {
            if !(1..=MAX_LOG_POSITION).contains(&value) {
                return Err(format!(
                    "header: {field} {value} is out of range 1..={MAX_LOG_POSITION}"
                ));
            }
        }
        if self.taken_by_node == 0 {
            return Err("header: taken_by_node 0 is not a node id".into());
        }
        Ok(())
    }
}

/// A backup file that cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[error("backup file {path}: {problem}")]
pub struct BackupError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub problem: String,
}

impl BackupError {
    fn at(path: &Path, problem: impl std::fmt::Display) -> Self {
        BackupError {
            path: path.display().to_string(),
            problem: problem.to_string(),
        }
    }
}

/// `<path>.tmp`, where a backup is written before it is renamed.
fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Refuses a target that cannot become a backup file (an existing
/// directory), before a gateway is asked for anything.
///
/// # Errors
/// `path` is a directory.
pub fn check_target(path: &Path) -> Result<(), BackupError> {
    if path.is_dir() {
        return Err(BackupError::at(
            path,
            format!(
                "is a directory: name the file to write (e.g. {})",
                path.join("openshell.osbackup").display()
            ),
        ));
    }
    Ok(())
}

/// Creates `<path>.tmp` afresh, mode 0600 (a stale one is removed first).
fn create_tmp(path: &Path) -> Result<(PathBuf, std::fs::File), BackupError> {
    check_target(path)?;
    let tmp = tmp_path(path);
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(BackupError::at(&tmp, e)),
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| BackupError::at(&tmp, e))?;
    Ok((tmp, file))
}

/// Syncs `file`, renames `tmp` to `path` and syncs the directory.
fn install(tmp: &Path, path: &Path, file: std::fs::File) -> std::io::Result<()> {
    file.sync_all()?;
    drop(file);
    std::fs::rename(tmp, path)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

/// The trailer of a file whose bytes before it hash to `digest`.
fn trailer(digest: &[u8]) -> Vec<u8> {
    let mut out = TRAILER_TAG.to_vec();
    out.extend_from_slice(hex::encode(digest).as_bytes());
    out.push(b'\n');
    out
}

/// Writes a backup file whole (to `<path>.tmp`, then renamed).
///
/// # Errors
/// When the header is out of range or the file cannot be written.
pub fn write(path: &Path, header: &BackupHeader, state: &[u8]) -> Result<(), BackupError> {
    let mut writer = BackupWriter::create(path, header.clone())?;
    writer.append(state)?;
    writer.finish().map(|_| ())
}

/// Reads and verifies a format-2 backup file (of any size).
///
/// # Errors
/// When it cannot be read, is not a backup, is of format 1, is truncated or
/// too long, its checksum does not match, or a header field is out of
/// range.
pub fn read(path: &Path) -> Result<(BackupHeader, Vec<u8>), BackupError> {
    let bytes = std::fs::read(path).map_err(|e| BackupError::at(path, e))?;
    decode(&bytes).map_err(|mut e| {
        e.path = path.display().to_string();
        e
    })
}

/// Reads a format-1 file, which an operator asked for explicitly: its
/// length and state crc32 are verified and every header field is checked
/// ([`BackupHeader::check`]), but nothing proves the header unchanged.
///
/// # Errors
/// As [`read`]; a format-2 file is refused too (read it with [`read`]).
pub fn read_format_1(path: &Path) -> Result<(BackupHeader, Vec<u8>), BackupError> {
    let bytes = std::fs::read(path).map_err(|e| BackupError::at(path, e))?;
    let at = |problem: String| BackupError::at(path, problem);
    let rest = bytes
        .strip_prefix(MAGIC_V1)
        .ok_or_else(|| at("is not a format-1 backup (OSBACKUP1)".into()))?;
    let (header, state) = header_line(rest).map_err(at)?;
    if state.len() as u64 != header.bytes {
        let before = (bytes.len() - state.len()) as u64;
        return Err(at(length_problem(
            bytes.len() as u64,
            before.saturating_add(header.bytes),
            header.bytes,
        )));
    }
    header.check().map_err(at)?;
    if crc32fast::hash(state) != header.crc32 {
        return Err(at("checksum mismatch: the state is damaged".into()));
    }
    Ok((header, state.to_vec()))
}

/// The header line at the start of `rest`, and what follows it.
fn header_line(rest: &[u8]) -> Result<(BackupHeader, &[u8]), String> {
    let newline = rest
        .iter()
        .take(MAX_HEADER_BYTES)
        .position(|b| *b == b'\n')
        .ok_or_else(|| "truncated or oversized header".to_string())?;
    let header: BackupHeader =
        serde_json::from_slice(&rest[..newline]).map_err(|e| format!("damaged header: {e}"))?;
    Ok((header, &rest[newline + 1..]))
}

/// The problem with a file of `len` bytes when its header announces
/// `expected` bytes in all, `state` of them the state.
fn length_problem(len: u64, expected: u64, state: u64) -> String {
    if len < expected {
        format!(
            "truncated: the file is {len} bytes, its header announces {expected} ({state} of state); \
             it was cut short (copy it again)"
        )
    } else {
        format!(
            "too long: the file is {len} bytes, {} more than the {expected} its header announces \
             ({state} of state); bytes were added after the backup (copy it again)",
            len - expected
        )
    }
}

/// Decodes and verifies the bytes of a format-2 backup file; the error's
/// `path` is `<memory>` ([`read`] names the file).
///
/// # Errors
/// As [`read`].
pub fn decode(bytes: &[u8]) -> Result<(BackupHeader, Vec<u8>), BackupError> {
    let bad = |problem: String| BackupError {
        path: "<memory>".into(),
        problem,
    };
    if let Some(old) = bytes.strip_prefix(MAGIC_V1) {
        let line = old.split(|b| *b == b'\n').next().unwrap_or_default();
        let shown = String::from_utf8_lossy(&line[..line.len().min(512)]).into_owned();
        return Err(bad(format!(
            "is a format-1 backup (OSBACKUP1, written by a version before format 2): its header is \
             not covered by a checksum, so a changed header cannot be detected; take a new backup \
             (`openshell-pool backup save`), or restore this one with `openshell-gateway restore \
             --accept-format-1` after checking its header: {}",
            shown.escape_debug()
        )));
    }
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("not an openshell backup (bad magic)".into()))?;
    let (header, after) = header_line(rest).map_err(bad)?;
    let before = (bytes.len() - after.len()) as u64;
    let with_trailer = header.bytes.saturating_add(TRAILER_LEN as u64);
    if after.len() as u64 != with_trailer {
        return Err(bad(length_problem(
            bytes.len() as u64,
            before.saturating_add(with_trailer),
            header.bytes,
        )));
    }
    let body_end = bytes.len() - TRAILER_LEN;
    let recorded = bytes[body_end..]
        .strip_prefix(TRAILER_TAG)
        .and_then(|t| t.strip_suffix(b"\n"))
        .and_then(|h| hex::decode(h).ok())
        .ok_or_else(|| bad("damaged trailer: the file ends without its checksum".into()))?;
    if Sha256::digest(&bytes[..body_end]).as_slice() != recorded.as_slice() {
        return Err(bad(
            "checksum mismatch: the file was changed or damaged (its header or its state); \
             nothing was restored"
                .into(),
        ));
    }
    header.check().map_err(bad)?;
    let state = &after[..after.len() - TRAILER_LEN];
    if crc32fast::hash(state) != header.crc32 {
        return Err(bad(
            "checksum mismatch: the state does not match the header's crc32".into(),
        ));
    }
    Ok((header, state.to_vec()))
}

/// Writes a backup file as its state arrives: [`BackupWriter::create`]
/// with the header (length and crc32 announced up front), [`append`] each
/// chunk, then [`finish`], which checks the length and crc32 of what came,
/// writes the trailer, fsyncs, and renames `<path>.tmp` to `<path>`. An
/// unfinished or failed one leaves no `<path>.tmp` behind. Memory: one
/// chunk.
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
    /// SHA-256 of every byte written so far (the trailer's).
    sha: Sha256,
}

impl BackupWriter {
    /// Starts `path` (as `<path>.tmp`, mode 0600) with `header`.
    ///
    /// # Errors
    /// When `path` is a directory, a header field is out of range
    /// ([`BackupHeader::check`]: restore would refuse the file), or the
    /// temporary file cannot be created or written.
    pub fn create(path: &Path, header: BackupHeader) -> Result<Self, BackupError> {
        header
            .check()
            .map_err(|p| BackupError::at(path, format!("the gateway sent a bad {p}")))?;
        let (tmp, file) = create_tmp(path)?;
        let mut writer = BackupWriter {
            path: path.to_path_buf(),
            file: Some(std::io::BufWriter::new(file)),
            tmp,
            header,
            written: 0,
            crc: crc32fast::Hasher::new(),
            sha: Sha256::new(),
        };
        let mut head = MAGIC.to_vec();
        serde_json::to_writer(&mut head, &writer.header).map_err(|e| writer.err(e.to_string()))?;
        head.push(b'\n');
        writer.put(&head)?;
        Ok(writer)
    }

    /// Writes `bytes` to the file and the running SHA-256.
    fn put(&mut self, bytes: &[u8]) -> Result<(), BackupError> {
        self.sha.update(bytes);
        let result = match self.file.as_mut() {
            Some(file) => file.write_all(bytes),
            None => Err(std::io::Error::other("already finished")),
        };
        result.map_err(|e| self.err(e.to_string()))
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
        self.put(data)
    }

    /// Checks length and crc32, writes the trailer, fsyncs and renames the
    /// file into place.
    ///
    /// # Errors
    /// When the state is short or damaged, or the file cannot be written,
    /// synced or renamed; `<path>.tmp` is removed in every case.
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
        let trailer = trailer(&self.sha.clone().finalize());
        self.put(&trailer)?;
        let installed = self
            .file
            .take()
            .ok_or_else(|| std::io::Error::other("already finished"))
            .and_then(|f| f.into_inner().map_err(|e| e.into_error()))
            .and_then(|f| install(&self.tmp, &self.path, f));
        if let Err(e) = installed {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(self.err(e.to_string()));
        }
        Ok(self.header.clone())
    }

    fn err(&self, problem: String) -> BackupError {
        BackupError::at(&self.path, problem)
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

    fn tmp_err(e: std::io::Error) -> BackupError {
        BackupError {
            path: "tmp".into(),
            problem: e.to_string(),
        }
    }

    fn encoded(h: &BackupHeader, state: &[u8]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend(serde_json::to_vec(h).unwrap_or_default());
        bytes.push(b'\n');
        bytes.extend(state);
        let digest = Sha256::digest(&bytes);
        bytes.extend(trailer(&digest));
        bytes
    }

    #[test]
    fn a_streamed_file_reads_as_written_in_one_piece() -> Result<(), BackupError> {
        let dir = tempfile::tempdir().map_err(tmp_err)?;
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
        assert_eq!(read(&streamed)?, (header(&state), state.clone()));
        assert_eq!(
            std::fs::read(&whole).ok(),
            Some(encoded(&header(&state), &state))
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&whole)
            .map_err(tmp_err)?
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        Ok(())
    }

    #[test]
    fn a_short_or_damaged_stream_leaves_no_file() -> Result<(), BackupError> {
        let dir = tempfile::tempdir().map_err(tmp_err)?;
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
        assert!(!path.exists() && !tmp_path(&path).exists());
        Ok(())
    }

    #[test]
    fn a_directory_is_refused_before_anything_is_written() -> Result<(), BackupError> {
        let dir = tempfile::tempdir().map_err(tmp_err)?;
        let target = dir.path().join("existing");
        std::fs::create_dir(&target).map_err(tmp_err)?;
        let e = write(&target, &header(b"xy"), b"xy").err();
        assert!(
            e.as_ref()
                .is_some_and(|e| e.problem.contains("is a directory")),
            "{e:?}"
        );
        assert!(!tmp_path(&target).exists(), "no <dir>.tmp left behind");
        Ok(())
    }

    #[test]
    fn garbage_does_not_decode() {
        for bytes in [&b""[..], b"OSBACKUP2\n", b"OSBACKUP2\n{}\n", b"nope"] {
            assert!(decode(bytes).is_err());
        }
        let mut good = encoded(&header(b"xy"), b"xy");
        assert!(decode(&good).is_ok());
        good.push(b'!');
        let e = decode(&good).err().map(|e| e.problem).unwrap_or_default();
        assert!(e.starts_with("too long: "), "{e}");
        good.truncate(good.len() - 5);
        let e = decode(&good).err().map(|e| e.problem).unwrap_or_default();
        assert!(e.starts_with("truncated: "), "{e}");
    }

    #[test]
    fn an_edited_header_or_out_of_range_field_is_refused() {
        let good = encoded(&header(b"xy"), b"xy");
        let text = String::from_utf8_lossy(&good).into_owned();
        let edited = text.replace("\"index\":9", "\"index\":8");
        let e = decode(edited.as_bytes()).err().map(|e| e.problem);
        assert!(
            e.as_deref()
                .is_some_and(|e| e.starts_with("checksum mismatch")),
            "{e:?}"
        );
        let cases = [
            (
                BackupHeader::for_state("../../x\0".into(), 2, 9, 1, b"xy"),
                "cluster_id",
            ),
            (
                BackupHeader::for_state("c".into(), 2, u64::MAX, 1, b"xy"),
                "index",
            ),
            (BackupHeader::for_state("c".into(), 0, 9, 1, b"xy"), "term"),
            (
                BackupHeader::for_state("c".into(), 2, 9, 0, b"xy"),
                "taken_by_node",
            ),
        ];
        for (h, field) in cases {
            let e = decode(&encoded(&h, b"xy")).err().map(|e| e.problem);
            assert!(
                e.as_deref()
                    .is_some_and(|e| e.starts_with("header: ") && e.contains(field)),
                "{field}: {e:?}"
            );
        }
    }

    #[test]
    fn a_format_1_file_is_refused_by_read_and_read_by_read_format_1() -> Result<(), BackupError> {
        let dir = tempfile::tempdir().map_err(tmp_err)?;
        let path = dir.path().join("old.osbackup");
        let mut old = MAGIC_V1.to_vec();
        old.extend(serde_json::to_vec(&header(b"xy")).unwrap_or_default());
        old.push(b'\n');
        old.extend(b"xy");
        std::fs::write(&path, &old).map_err(tmp_err)?;
        let e = read(&path).err().map(|e| e.problem).unwrap_or_default();
        assert!(
            e.contains("format-1") && e.contains("--accept-format-1"),
            "{e}"
        );
        assert_eq!(read_format_1(&path)?, (header(b"xy"), b"xy".to_vec()));
        old.extend(b"more");
        std::fs::write(&path, &old).map_err(tmp_err)?;
        let e = read_format_1(&path)
            .err()
            .map(|e| e.problem)
            .unwrap_or_default();
        assert!(e.starts_with("too long: "), "{e}");
        Ok(())
    }
}
