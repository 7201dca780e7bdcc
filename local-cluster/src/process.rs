//! The processes of a local cluster: one started program
//! ([`ChildProcess`]: spawn, signal, pause, `kill -9` and reap), the
//! programs of a cluster started in order and stopped together
//! ([`ProcessSet`]), the hook that runs a program in a network namespace
//! ([`in_namespace`]: `ip netns exec`, which execs, so the child's pid is
//! the program's own) and where its output goes ([`log_to`], mode 0600).
//! The launchers (`openshell-pool dev`, testkit, the Jepsen harness, the
//! benchmarks) keep their policy: what they start, in which namespace or
//! process group, and when they signal it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

/// Named programs started in order ([`ProcessSet::spawn`]) and stopped
/// together ([`ProcessSet::stop`]); any still running when the set is
/// dropped are killed (an error on the way up leaves nothing behind).
#[derive(Debug, Default)]
pub struct ProcessSet {
    started: Vec<(String, ChildProcess)>,
}

impl ProcessSet {
    /// Starts `command` as `name`, after those started before it.
    ///
    /// # Errors
    /// [`ProcessError::Spawn`] naming it.
    pub fn spawn(&mut self, name: &str, command: &mut Command) -> Result<(), ProcessError> {
        let child = ChildProcess::default();
        child.spawn(command, name)?;
        self.started.push((name.to_string(), child));
        Ok(())
    }

    /// The pids of the started programs still running.
    pub fn pids(&self) -> Vec<i32> {
        self.started.iter().filter_map(|(_, c)| c.pid()).collect()
    }

    /// The programs that exited by themselves since the last call, with
    /// their status, in the order they were started; they are reaped.
    pub fn take_exited(&self) -> Vec<(String, ExitStatus)> {
        self.started
            .iter()
            .filter_map(|(name, c)| c.take_exit().map(|status| (name.clone(), status)))
            .collect()
    }

    /// Stops every program: SIGTERM to each (in the order they were
    /// started), up to `grace` for all of them to exit, then SIGKILL and
    /// reap those still running. Returns the names of those killed.
    /// Blocking: call it from a thread that may wait `grace`.
    pub fn stop(&mut self, grace: Duration) -> Vec<String> {
        for (_, child) in &self.started {
            // A program that exited already is reaped below.
            let _ = child.signal(libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        loop {
            for (_, child) in &self.started {
                let _ = child.take_exit();
            }
            let running = self.started.iter().any(|(_, c)| c.is_running());
            if !running || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let killed = self
            .started
            .iter()
            .filter(|(_, c)| c.is_running())
            .map(|(name, c)| {
                c.kill9();
                name.clone()
            })
            .collect();
        self.started.clear();
        killed
    }
}

impl Drop for ProcessSet {
    fn drop(&mut self) {
        for (_, child) in &self.started {
            child.kill9();
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
/// `log` (appended; created if missing, mode 0600: logs may name secrets'
/// paths and peers).
///
/// # Errors
/// [`ProcessError::Log`] when the log cannot be opened.
pub fn log_to(command: &mut Command, log: &Path) -> Result<(), ProcessError> {
    let opened = |source| ProcessError::Log {
        path: log.to_path_buf(),
        source,
    };
    use std::os::unix::fs::OpenOptionsExt;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
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

    #[test]
    fn a_set_stops_what_it_started_and_kills_what_ignores_sigterm() {
        let mut set = ProcessSet::default();
        let mut polite = Command::new("sleep");
        polite.arg("30");
        set.spawn("polite", &mut polite).expect("spawn");
        let mut stubborn = Command::new("sh");
        stubborn.args(["-c", "trap '' TERM; exec sleep 30"]);
        set.spawn("stubborn", &mut stubborn).expect("spawn");
        let mut quick = Command::new("true");
        set.spawn("quick", &mut quick).expect("spawn");
        let pids = set.pids();
        assert_eq!(pids.len(), 3);
        let exited = (0..200)
            .find_map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                let e = set.take_exited();
                (!e.is_empty()).then_some(e)
            })
            .expect("quick exits");
        assert_eq!(exited.len(), 1);
        assert_eq!(exited[0].0, "quick");
        assert!(exited[0].1.success());
        assert_eq!(set.pids().len(), 2);
        let killed = set.stop(Duration::from_millis(500));
        assert_eq!(killed, vec!["stubborn".to_string()]);
        for pid in pids {
            assert!(!Path::new(&format!("/proc/{pid}")).exists(), "{pid} left");
        }
    }
}
