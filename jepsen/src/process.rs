//! A child process the harness started and can signal: gateways
//! ([`crate::cluster`]) and pool supervisors
//! ([`crate::members::process`]) are both started with
//! `ip netns exec <ns> <bin> ...`, which execs, so the child's pid is the
//! program's own.

use std::process::{Child, Command};
use std::sync::Mutex;

use anyhow::{bail, Context};

/// The running process of one harness-managed program, if any. A std mutex:
/// held only while spawning or signalling, never across an await.
#[derive(Default)]
pub struct ChildProcess {
    child: Mutex<Option<Child>>,
}

impl ChildProcess {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        match self.child.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Spawns `command` unless a process is already running; returns
    /// whether it spawned one.
    ///
    /// # Errors
    /// When the process cannot be spawned (`what` names it).
    pub fn spawn(&self, command: &mut Command, what: &str) -> anyhow::Result<bool> {
        let mut child = self.lock();
        if child.is_some() {
            return Ok(false);
        }
        *child = Some(
            command
                .spawn()
                .with_context(|| format!("spawning {what}"))?,
        );
        Ok(true)
    }

    /// Process id, when running.
    pub fn pid(&self) -> Option<i32> {
        self.lock()
            .as_ref()
            .and_then(|c| i32::try_from(c.id()).ok())
    }

    /// Whether a process was started and not killed (it may have exited on
    /// its own: see [`ChildProcess::exited`]).
    pub fn is_running(&self) -> bool {
        self.lock().is_some()
    }

    /// Whether the started process has exited by itself.
    pub fn exited(&self) -> bool {
        self.lock()
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Sends `sig` to the process.
    ///
    /// # Errors
    /// When it is not running or kill(2) fails.
    pub fn signal(&self, sig: i32) -> anyhow::Result<()> {
        let pid = self.pid().context("not running")?;
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        let rc = unsafe { libc::kill(pid, sig) };
        if rc != 0 {
            bail!("kill({pid}, {sig}): {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// `kill -9` (after SIGCONT, so a paused process dies) and reap.
    pub fn kill9(&self) {
        if let Some(mut c) = self.lock().take() {
            if let Ok(pid) = i32::try_from(c.id()) {
                // SAFETY: signals to our own child; no memory is touched.
                unsafe {
                    libc::kill(pid, libc::SIGCONT);
                }
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `ip netns exec <ns> <bin>`: a command that runs `bin` in namespace `ns`
/// (add its arguments, environment and output).
pub fn in_namespace(ns: &str, bin: &std::path::Path) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", ns]).arg(bin);
    command
}

/// Points the command's stdin at /dev/null and its stdout and stderr at
/// `log` (appended, created if missing).
///
/// # Errors
/// When the log cannot be opened.
pub fn log_to(command: &mut Command, log: &std::path::Path) -> anyhow::Result<()> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let err = out.try_clone().context("log file")?;
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(out))
        .stderr(std::process::Stdio::from(err));
    Ok(())
}
