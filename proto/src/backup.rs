//! Backup files: a consistent snapshot of the replicated state with the log
//! position it reflects. `openshell-pool backup save` writes them (from a
//! `ClusterAdmin.Backup` reply) and `openshell-gateway restore` reads them,
//! so the format lives here, beside the messages it carries.
//!
//! ```text
//! OSBACKUP1\n
//! {"cluster_id":"...","term":T,"index":I,"bytes":N,"crc32":C,"taken_by_node":K}\n
//! <N bytes: the state machine snapshot encoding (openshell.gateway.v1.LogSnapshot)>
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

const MAGIC: &[u8] = b"OSBACKUP1\n";

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

/// Reads and verifies a backup file.
///
/// # Errors
/// When it is not a backup, is truncated, or its checksum does not match.
pub fn read(path: &Path) -> Result<(BackupHeader, Vec<u8>), BackupError> {
    let bad = |problem: String| BackupError {
        path: path.display().to_string(),
        problem,
    };
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("not an openshell backup (bad magic)".into()))?;
    let newline = rest
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| bad("truncated header".into()))?;
    let header: BackupHeader = serde_json::from_slice(&rest[..newline])
        .map_err(|e| bad(format!("damaged header: {e}")))?;
    let state = rest[newline + 1..].to_vec();
    if state.len() as u64 != header.bytes {
        return Err(bad(format!(
            "truncated: {} of {} state bytes",
            state.len(),
            header.bytes
        )));
    }
    if crc32fast::hash(&state) != header.crc32 {
        return Err(bad("checksum mismatch: the file is damaged".into()));
    }
    Ok((header, state))
}
