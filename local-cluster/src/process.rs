//! The processes of a local cluster: one started program
//! ([`ChildProcess`]: spawn, signal, pause, `kill -9` and reap), the hook
//! that runs a program in a network namespace ([`in_namespace`]:
//! `ip netns exec`, which execs, so the child's pid is the program's own)
//! and where its output goes ([`log_to`]). The launchers (testkit, the
//! Jepsen harness, the benchmarks) keep their policy: what they start, in
//! which namespace, and when they signal it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::Mutex;

/// Why a process could not be started, signalled or logged.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program could not be spawned.
    #[error("spawning {what}: {source}")]
    Spawn {
        /// The program, as the launcher names it.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// No process runs.
    #[error("not running")]
    NotRunning,
    /// kill(2) failed.
    #[error("kill({pid}, {signal}): {source}")]
    Signal {
        /// The process.
        pid: i32,
        /// The signal.
        signal: i32,
        /// Why.
        source: std::io::Error,
    },
    /// The log file could not be opened.
    #[error("opening {path}: {source}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The running process of one launched program, if any. A std mutex: held
/// only while spawning, signalling or reaping, never across an await.
#[derive(Debug, Default)]
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
    /// [`ProcessError::Spawn`] naming `what`.
    pub fn spawn(&self, command: &mut Command, what: &str) -> Result<bool, ProcessError> {
        let mut child = self.lock();
        if child.is_some() {
            return Ok(false);
        }
        let spawned = command.spawn().map_err(|source| ProcessError::Spawn {
            what: what.to_string(),
            source,
        })?;
        *child = Some(spawned);
        Ok(true)
    }

    /// Process id, when running.
    pub fn pid(&self) -> Option<i32> {
        self.lock()
            .as_ref()
            .and_then(|c| i32::try_from(c.id()).ok())
    }

    /// Whether a process was started and not reaped (it may have exited on
    /// its own: see [`ChildProcess::exited`]).
    pub fn is_running(&self) -> bool {
        self.lock().is_some()
    }

    /// Whether the started process has exited by itself (not reaped).
    pub fn exited(&self) -> bool {
        self.lock()
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// The exit status of a process that exited by itself, which is then
    /// reaped (a later [`ChildProcess::spawn`] starts it again); `None`
    /// while it runs or when none was started.
    pub fn take_exit(&self) -> Option<ExitStatus> {
        let mut child = self.lock();
        let status = child.as_mut()?.try_wait().ok()??;
        *child = None;
        Some(status)
    }

    /// Sends `sig` to the process.
    ///
    /// # Errors
    /// When it is not running or kill(2) fails.
    pub fn signal(&self, sig: i32) -> Result<(), ProcessError> {
        let pid = self.pid().ok_or(ProcessError::NotRunning)?;
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        let rc = unsafe { libc::kill(pid, sig) };
        if rc != 0 {
            return Err(ProcessError::Signal {
                pid,
                signal: sig,
                source: std::io::Error::last_os_error(),
            });
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

/// `ip netns exec <ns> <bin>`: a command that runs `bin` in the network
/// namespace `ns` (add its arguments, environment and output).
pub fn in_namespace(ns: &str, bin: &Path) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", ns]).arg(bin);
    command
}

/// Points the command's stdin at /dev/null and its stdout and stderr at
/// `log` (appended, created if missing).
///
/// # Errors
/// [`ProcessError::Log`] when the log cannot be opened.
pub fn log_to(command: &mut Command, log: &Path) -> Result<(), ProcessError> {
    let opened = |source| ProcessError::Log {
        path: log.to_path_buf(),
        source,
    };
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(opened)?;
    let err = out.try_clone().map_err(opened)?;
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(out))
        .stderr(std::process::Stdio::from(err));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_signalled_reaped_and_started_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("child.log");
        let child = ChildProcess::default();
        let mut sleep = Command::new("sleep");
        sleep.arg("30");
        log_to(&mut sleep, &log).expect("log");
        assert!(child.spawn(&mut sleep, "sleep").expect("spawn"));
        assert!(
            !child.spawn(&mut sleep, "sleep").expect("second spawn"),
            "one at a time"
        );
        assert_eq!(child.take_exit(), None, "still running");
        child.signal(libc::SIGTERM).expect("SIGTERM");
        let status = (0..200)
            .find_map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                child.take_exit()
            })
            .expect("exited after SIGTERM");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        assert!(!child.is_running());
        assert!(matches!(
            child.signal(libc::SIGTERM),
            Err(ProcessError::NotRunning)
        ));
        let mut echo = Command::new("sh");
        echo.args(["-c", "echo started"]);
        log_to(&mut echo, &log).expect("log");
        assert!(child.spawn(&mut echo, "sh").expect("spawn again"));
        let _ = (0..200).find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            child.take_exit()
        });
        assert_eq!(std::fs::read_to_string(&log).expect("log"), "started\n");
        assert!(matches!(
            log_to(&mut echo, Path::new("/nonexistent/dir/log")),
            Err(ProcessError::Log { .. })
        ));
    }
}
