//! File modes of a node's data: only the user the gateway runs as reads
//! them. The raft log, the snapshots and the watermark hold every object
//! and the pool's state (launch material, reports); another local user must
//! not read them.
//!
//! - Directories this crate creates (the data directory when absent,
//!   `raft/`, `snapshots/`, scratch copies) are created `0700`
//!   ([`create_private_dir_all`]), files `0600` ([`create_private_file`]),
//!   whatever the process's umask.
//! - sled creates its own files (`raft/db`, `raft/conf`, `raft/blobs/`)
//!   with the umask's mode: [`restrict`] brings them to `0600`/`0700` once
//!   the database is open; new files sled adds later sit in `raft/`, which
//!   is `0700`.
//! - At start-up, an existing data directory open to other users (any
//!   group or other bit) is logged as a warning naming the mode and the
//!   command that closes it ([`warn_if_open`]); it is not changed, since
//!   it may be a volume or a directory the operator manages. What the node
//!   owns inside it is brought to the modes above ([`restrict`]).

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of the directories a node owns.
pub const DIR_MODE: u32 = 0o700;

/// Mode of the files a node writes.
pub const FILE_MODE: u32 = 0o600;

/// Creates `path` and any missing parent, each new one `0700`.
///
/// # Errors
/// The I/O error of the creation.
pub fn create_private_dir_all(path: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
}

/// Creates (or truncates) the file `path`, `0600` when new.
///
/// # Errors
/// The I/O error of the creation.
pub fn create_private_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)
}

/// The permission bits of `path` when it lets group or others in.
pub fn open_to_others(path: &Path) -> Option<u32> {
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    (mode & 0o077 != 0).then_some(mode)
}

/// Warns (once, at start-up) when the data directory `path` lets other
/// users in; returns whether it did.
pub fn warn_if_open(path: &Path) -> bool {
    let Some(mode) = open_to_others(path) else {
        return false;
    };
    tracing::warn!(
        path = %path.display(),
        mode = format!("{mode:04o}"),
        "the data directory is open to other local users (they can list it, and read any file in it \
         an older version wrote with a wider mode): run `chmod 700 {}`",
        path.display()
    );
    true
}

/// Brings `path` (a file or a directory the node owns) and, for a
/// directory, everything in it to `0600` / `0700`. Returns how many modes
/// it changed.
///
/// # Errors
/// The first I/O error (a missing `path` is not one).
pub fn restrict(path: &Path) -> io::Result<usize> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    if meta.file_type().is_symlink() {
        return Ok(0);
    }
    // A file sled removes meanwhile (an old snapshot of its own) is gone,
    // not an error.
    let gone = |e: io::Error| {
        if e.kind() == io::ErrorKind::NotFound {
            Ok(())
        } else {
            Err(e)
        }
    };
    let want = if meta.is_dir() { DIR_MODE } else { FILE_MODE };
    let mut changed = 0;
    if meta.permissions().mode() & 0o777 != want {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(want)).or_else(gone)?;
        changed += 1;
    }
    if meta.is_dir() {
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) => return gone(e).map(|()| changed),
        };
        for entry in entries {
            changed += restrict(&entry?.path())?;
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn created_private_and_restricted_whatever_the_umask() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path().join("a").join("b");
        create_private_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&tmp.path().join("a")), 0o700);
        let file = dir.join("f");
        drop(create_private_file(&file).unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(mode(&file), 0o600);

        let wide = tmp.path().join("wide");
        std::fs::create_dir(&wide).unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&wide, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(wide.join("db"), b"x").unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(wide.join("db"), std::fs::Permissions::from_mode(0o644))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(open_to_others(&wide), Some(0o755));
        assert_eq!(restrict(&wide).unwrap_or_else(|e| panic!("{e}")), 2);
        assert_eq!((mode(&wide), mode(&wide.join("db"))), (0o700, 0o600));
        assert_eq!(open_to_others(&wide), None);
        assert_eq!(restrict(&tmp.path().join("absent")).ok(), Some(0));
    }
}
