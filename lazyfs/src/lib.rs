//! `openshell-lazyfs`: a FUSE passthrough filesystem in the spirit of
//! Jepsen's lazyfs. Written data stays in this process's memory until an
//! fsync/fdatasync of that file; killing the process is a power cut that
//! loses exactly what was never synced.
//!
//! # Layout
//! - [`cache`]: one file's volatile contents and dirty ranges (pure).
//! - [`fs`]: the FUSE filesystem over a backing directory (inodes, replies).
//! - [`mount`]: the harness side: start `openshell-lazyfs`, wait for the
//!   mount, cut the power (`kill -9` + lazy unmount), stop it cleanly.
//!
//! # Example: cut the power under a process
//!
//! ```no_run
//! use lazyfs::mount::LazyMount;
//! let bin = std::path::Path::new("target/debug/openshell-lazyfs");
//! let mut m = LazyMount::start(bin, "/tmp/backing".as_ref(), "/tmp/mnt".as_ref(), "/tmp/lazyfs.log".as_ref())?;
//! std::fs::write("/tmp/mnt/f", b"never synced")?;
//! m.cut()?; // the write is gone; the file exists, empty
//! m.remount()?;
//! m.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod cache;
pub mod fs;
pub mod mount;

/// What the harness side can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Spawning, signalling or unmounting failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The mount did not appear (or go away) in time.
    #[error("{0}")]
    Timeout(String),
}

/// This crate's result.
pub type Result<T> = std::result::Result<T, Error>;
