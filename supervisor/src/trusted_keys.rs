//! The trusted grant keys of a supervisor or a runtime: the ed25519 public
//! keys whose grants they accept. They are configured (a file,
//! `--trusted-grant-keys-file`, format in [`proto::grant`]), never learned
//! from the wire; only an `--insecure` supervisor passes on the key a
//! gateway announced, as a fixed set of one.
//!
//! A file is re-read when it changes (at most every [`RELOAD_EVERY`], when
//! a key is needed), so a key rotation edits the file in place and neither
//! supervisors nor runtimes restart; a file that no longer parses is logged
//! (file and line) and the previous set stays in force.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use proto::grant::{parse_trusted_keys, GrantVerifier};
use proto::watched_file::{Refresh, WatchedFile};

/// How often, at most, a trusted keys file is re-read.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// The flag (and variable) that names the file, for errors.
pub const FLAG: &str = "--trusted-grant-keys-file";

/// A set of trusted grant keys: fixed, or a file re-read on change.
#[derive(Clone, Debug)]
pub enum TrustedKeys {
    /// A set given once (argv, or learned by an `--insecure` supervisor).
    Fixed(Arc<GrantVerifier>),
    /// The keys of a trusted grant keys file.
    File(WatchedFile<GrantVerifier>),
}

impl TrustedKeys {
    /// Loads a trusted grant keys file.
    ///
    /// # Errors
    /// `<path>: line N: <problem>` (or why it cannot be read).
    pub fn load(path: &Path) -> Result<Self, String> {
        WatchedFile::load(path, parse_trusted_keys, RELOAD_EVERY).map(TrustedKeys::File)
    }

    /// The keys in force, after re-reading the file if it is due (logging
    /// a reload or a refused file).
    pub fn current(&self) -> Arc<GrantVerifier> {
        match self {
            TrustedKeys::Fixed(set) => set.clone(),
            TrustedKeys::File(file) => {
                match file.refresh() {
                    Refresh::Unchanged => {}
                    Refresh::Reloaded => tracing::info!(
                        file = %file.path().display(),
                        trusted = ?file.current().fingerprints(),
                        "trusted grant keys file reloaded"
                    ),
                    Refresh::Kept(error) => {
                        tracing::error!(%error, "trusted grant keys file refused")
                    }
                }
                file.current()
            }
        }
    }

    /// The file, if the set comes from one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            TrustedKeys::Fixed(_) => None,
            TrustedKeys::File(file) => Some(file.path()),
        }
    }

    /// Where the set comes from, with its fingerprints, for errors:
    /// `--trusted-grant-keys-file /etc/keys (trusts 1a2b..., 3c4d...)`.
    pub fn describe(&self) -> String {
        let trusted = self.current().fingerprints().join(", ");
        match self {
            TrustedKeys::Fixed(_) => format!("the configured key (trusts {trusted})"),
            TrustedKeys::File(file) => {
                format!("{FLAG} {} (trusts {trusted})", file.path().display())
            }
        }
    }
}
