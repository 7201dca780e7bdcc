//! The registry of fuzz targets: a name and a function over arbitrary bytes.
//!
//! A target panics (or aborts, through [`crate::CappedAlloc`]) only when the
//! decoder under it breaks the property of the crate doc; any input a
//! decoder refuses with its typed error is a pass. Targets that cover
//! several decoders take the first input byte as the selector
//! ([`split`]), so one corpus directory serves them all.

pub mod backup_file;
pub mod config;
pub mod forward_command;
pub mod grant;
pub mod page_token;
pub mod raft_rpc;
pub mod snapshot_file;
pub mod state_restore;

/// One fuzz target.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Its name: the corpus directory and the argument of `fuzz-afl`.
    pub name: &'static str,
    /// What it decodes, for `fuzz-afl --list` and the docs.
    pub what: &'static str,
    /// Runs one input.
    pub run: fn(&[u8]),
}

/// Every target, in the order `scripts/fuzz.sh all` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "raft_rpc",
        what: "raft transport codec: AppendEntries/Vote/InstallSnapshot requests and replies, log entries, votes",
        run: raft_rpc::run,
    },
    Target {
        name: "snapshot_file",
        what: "raft-store snapshot file (current.snap)",
        run: snapshot_file::run,
    },
    Target {
        name: "state_restore",
        what: "GatewayState::restore (objects + pool snapshot), PoolState::decode_snapshot, Objects::restore",
        run: state_restore::run,
    },
    Target {
        name: "forward_command",
        what: "a forwarded command: GatewayState::validate, then apply of what passed",
        run: forward_command::run,
    },
    Target {
        name: "backup_file",
        what: "backup file (proto::backup)",
        run: backup_file::run,
    },
    Target {
        name: "page_token",
        what: "object-store list page token",
        run: page_token::run,
    },
    Target {
        name: "grant",
        what: "SignedGrant verification with a fixed key, trusted grant keys file",
        run: grant::run,
    },
    Target {
        name: "config",
        what: "gateway TOML config file, supervisor settings",
        run: config::run,
    },
];

/// The target named `name`.
pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// Splits an input into its selector (first byte, 0 for an empty input)
/// and the rest.
pub fn split(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((first, rest)) => (*first, rest),
        None => (0, data),
    }
}

/// A scratch file holding `data`, for decoders that read a path; a new
/// name at every call (tests run targets in parallel threads), which the
/// caller removes. It lives in /dev/shm when there is one, so a fuzzing
/// run does not wear a disk.
pub fn scratch_file(name: &str, data: &[u8]) -> std::path::PathBuf {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!(
        "openshell-fuzz-{}-{call}-{name}",
        std::process::id()
    ));
    if let Err(e) = std::fs::write(&path, data) {
        panic!(
            "harness: cannot write the scratch file {}: {e}",
            path.display()
        );
    }
    path
}
