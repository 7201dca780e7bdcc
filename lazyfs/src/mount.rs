//! The harness side of a lazyfs mount: start `openshell-lazyfs` on a
//! backing directory, wait until the kernel shows the mount, and cut the
//! power: `kill -9` the process (its memory is the volatile cache) and
//! detach the dead mount lazily (`umount -l`, falling back to
//! `fusermount3 -uz`). [`LazyMount::remount`] then starts a fresh process
//! on what the backing directory kept.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// How long a mount may take to appear or disappear.
const MOUNT_WAIT: Duration = Duration::from_secs(10);

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Whether `mountpoint` is a mount point in this process's namespace.
pub fn is_mounted(mountpoint: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = mountpoint.to_string_lossy();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| m == want)
}

/// Detaches whatever is mounted at `mountpoint` (lazily: a dead FUSE
/// mount cannot be unmounted any other way). No-op when nothing is.
///
/// # Errors
/// When it stays mounted.
pub fn detach(mountpoint: &Path) -> Result<()> {
    let deadline = Instant::now() + MOUNT_WAIT;
    while is_mounted(mountpoint) {
        let umount = Command::new("umount").arg("-l").arg(mountpoint).output();
        if !umount.is_ok_and(|o| o.status.success()) {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(mountpoint)
                .output();
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout(format!(
                "{} is still mounted",
                mountpoint.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// One lazyfs mount and its process.
#[derive(Debug)]
pub struct LazyMount {
    /// The `openshell-lazyfs` binary.
    bin: PathBuf,
    /// Where synced data lives.
    pub backing: PathBuf,
    /// Where the processes above see it.
    pub mountpoint: PathBuf,
    /// The process's stderr (appended).
    log: PathBuf,
    /// The running process.
    child: Option<Child>,
}

impl LazyMount {
    /// Creates both directories and mounts.
    ///
    /// # Errors
    /// When the process cannot start or the mount does not appear.
    pub fn start(bin: &Path, backing: &Path, mountpoint: &Path, log: &Path) -> Result<LazyMount> {
        std::fs::create_dir_all(backing).map_err(io(format!("creating {}", backing.display())))?;
        std::fs::create_dir_all(mountpoint)
            .map_err(io(format!("creating {}", mountpoint.display())))?;
        let mountpoint = mountpoint
            .canonicalize()
            .map_err(io(format!("resolving {}", mountpoint.display())))?;
        let mut m = LazyMount {
            bin: bin.to_path_buf(),
            backing: backing.to_path_buf(),
            mountpoint,
            log: log.to_path_buf(),
            child: None,
        };
        m.remount()?;
        Ok(m)
    }

    /// The process id, while mounted.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts a fresh process on the backing directory (after a cut).
    ///
    /// # Errors
    /// When it cannot start or the mount does not appear.
    pub fn remount(&mut self) -> Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        detach(&self.mountpoint)?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io(format!("opening {}", self.log.display())))?;
        let child = Command::new(&self.bin)
            .arg(&self.backing)
            .arg(&self.mountpoint)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(io(format!("starting {}", self.bin.display())))?;
        self.child = Some(child);
        let deadline = Instant::now() + MOUNT_WAIT;
        while !is_mounted(&self.mountpoint) {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                return Err(Error::Timeout(format!(
                    "openshell-lazyfs exited ({status}) before mounting {}; see {}",
                    self.mountpoint.display(),
                    self.log.display()
                )));
            }
            if Instant::now() > deadline {
                self.cut()?;
                return Err(Error::Timeout(format!(
                    "{} not mounted within {MOUNT_WAIT:?}; see {}",
                    self.mountpoint.display(),
                    self.log.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// The power cut: `kill -9` (everything not fsynced is gone with the
    /// process's memory), then a lazy unmount of the dead mount. Processes
    /// still using it see errors (`ENOTCONN`); stop them first.
    ///
    /// # Errors
    /// When the mount cannot be detached.
    pub fn cut(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        detach(&self.mountpoint)
    }

    /// A clean stop: SIGTERM (the process unmounts itself), then a cut if
    /// it is still there after a few seconds. Unsynced data is lost either
    /// way: stopping is not a sync.
    ///
    /// # Errors
    /// When the mount cannot be detached.
    pub fn stop(&mut self) -> Result<()> {
        if let Some(child) = &mut self.child {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if child.try_wait().ok().flatten().is_some() {
                    self.child = None;
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.cut()
    }
}

impl Drop for LazyMount {
    fn drop(&mut self) {
        let _ = self.cut();
    }
}
