//! The sandbox runtimes of `dev` and the lock on its data directory.
//!
//! `dev`'s gateways launch runtimes through the process driver
//! (`--sandbox-driver process`) into one directory shared by all three,
//! `<data dir>/runtimes/` ([`DIR`]): `<name>/pid`, `<name>/netns` (as root)
//! and so on (`sandbox_driver::process`). A runtime is a child of the gateway
//! that led when it was launched, in a session of its own (and, as root, a
//! network namespace `sbx-...` of its own), so it outlives that gateway: a
//! new leader adopts it.
//!
//! - On start nothing is removed: a runtime of an earlier run that is still
//!   alive (its `dev` was killed, not stopped) is adopted by the new leader
//!   like any runtime that outlived a gateway; one that is gone makes its
//!   sandbox fail `RuntimeLost`. The demo sandboxes are launched afresh
//!   either way (`demo`), and the leader deletes the runtimes of the
//!   generations that replaced them.
//! - On stop ([`delete_all`]), once the gateways are gone (no launcher left
//!   to launch or record anything), every runtime in the directory is
//!   deleted through the driver, as the leader would delete it: SIGTERM to
//!   its process group, SIGKILL after 3 s, its network namespace and its
//!   directory removed. This reaches runtimes whether or not they descend
//!   from this `dev` (the subreaper of `children` only sees descendants).
//!
//! [`DevLock`] keeps a second `dev` off a data directory in use, so that its
//! stop never deletes the runtimes of the first.

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandbox_driver::process::{NetnsMode, ProcessConfig, ProcessDriver};
use sandbox_driver::SandboxDriver;

use crate::CliError;

/// The process driver's directory under the data directory.
pub const DIR: &str = "runtimes";

/// An exclusive `flock` on `<data dir>/dev.lock`, held while `dev` runs.
#[derive(Debug)]
pub struct DevLock(#[allow(dead_code)] std::fs::File);

impl DevLock {
    /// Takes the lock on `dir`, refusing when another `dev` holds it.
    ///
    /// # Errors
    /// [`CliError::Local`]: the lock file cannot be opened, or another
    /// process holds the lock.
    pub fn take(dir: &Path) -> Result<DevLock, CliError> {
        let path = dir.join("dev.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| CliError::Local(format!("{}: {e}", path.display())))?;
        // SAFETY: flock on a descriptor this function owns.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(CliError::Local(format!(
                "{} is in use by another `openshell-pool dev` ({} is locked): stop that one first",
                dir.display(),
                path.display()
            )));
        }
        Ok(DevLock(file))
    }
}

/// Where `dev` stops runtimes: the driver directory and the runtime binary.
#[derive(Clone, Debug)]
pub struct Runtimes {
    /// `<data dir>/runtimes`.
    pub dir: PathBuf,
    /// The `openshell-sandbox-runtime` the gateways launch.
    pub runtime_bin: PathBuf,
}

/// How many runtime entries `dir` holds (those of an earlier run, before
/// the gateways start).
pub fn count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().is_dir() && !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0)
}

/// Deletes every runtime under `runtimes.dir` through the process driver,
/// all at once; returns how many entries it removed. Failures are said on
/// stderr (the rest are still deleted).
pub async fn delete_all(runtimes: &Runtimes) -> usize {
    if !runtimes.dir.is_dir() {
        return 0;
    }
    let driver = match ProcessDriver::new(ProcessConfig {
        dir: runtimes.dir.clone(),
        runtime_bin: runtimes.runtime_bin.clone(),
        // Deleting reads each entry's `netns` file whatever the mode.
        netns: NetnsMode::Off,
    }) {
        Ok(driver) => Arc::new(driver),
        Err(e) => {
            eprintln!("cannot stop the runtimes: {e}");
            return 0;
        }
    };
    let names: Vec<String> = match std::fs::read_dir(&runtimes.dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str().map(ToString::to_string))
            .filter(|name| !name.starts_with('.'))
            .collect(),
        Err(e) => {
            eprintln!("cannot list {}: {e}", runtimes.dir.display());
            return 0;
        }
    };
    let tasks: Vec<_> = names
        .into_iter()
        .map(|name| {
            let driver = Arc::clone(&driver);
            tokio::spawn(async move {
                let result = driver.delete(&name).await;
                (name, result)
            })
        })
        .collect();
    let mut deleted = 0;
    for task in tasks {
        match task.await {
            Ok((_, Ok(()))) => deleted += 1,
            Ok((name, Err(e))) => eprintln!("cannot delete runtime {name}: {e}"),
            Err(e) => eprintln!("a runtime deletion failed: {e}"),
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_dev_on_one_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let first = DevLock::take(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let second = DevLock::take(dir.path());
        assert!(
            matches!(&second, Err(CliError::Local(m)) if m.contains("another `openshell-pool dev`")),
            "{second:?}"
        );
        drop(first);
        assert!(DevLock::take(dir.path()).is_ok());
    }

    #[tokio::test]
    async fn entries_without_a_process_are_removed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let runtimes = Runtimes {
            dir: dir.path().join(DIR),
            runtime_bin: PathBuf::from("/bin/true"),
        };
        assert_eq!(delete_all(&runtimes).await, 0, "no directory yet");
        std::fs::create_dir_all(runtimes.dir.join("sbx-a-1")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(runtimes.dir.join("sbx-b-1")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(delete_all(&runtimes).await, 2);
        assert!(!runtimes.dir.join("sbx-a-1").exists());
    }
}
