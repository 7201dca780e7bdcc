//! The processes `dev` owns and how they stop: by pid, with signals this
//! process sends itself (no `kill` or `pkill` commands).
//!
//! `dev` spawns the gateways and the supervisors; the leading gateway
//! launches a sandbox runtime per sandbox through its process driver, in a
//! session of its own, so that the runtime (and the workload it holds)
//! outlives that gateway and every supervisor. Before it spawns anything,
//! `dev` makes itself a child subreaper ([`become_subreaper`]): when a
//! gateway exits (stopped, or killed by hand to try a failover), its
//! runtimes are reparented to `dev` and become its own children; while the
//! cluster runs, [`Children::report_exits`] reaps those that exit.
//!
//! [`Children::stop`] then, in order:
//! 1. sends SIGTERM to every process `dev` spawned, by pid (each runs in a
//!    process group of its own, so a terminal's Ctrl-C reaches `dev` alone
//!    and this is the one stop they get); waits up to [`STOP_GRACE`] for
//!    all; SIGKILLs and reaps those still running (the local cluster's
//!    `ProcessSet::stop`);
//! 2. deletes every runtime of the driver directory through the process
//!    driver ([`super::runtimes::delete_all`]: SIGTERM to its group, which
//!    stops its workload first, SIGKILL after 3 s, its network namespace and
//!    entry removed), descendant of `dev` or not (a runtime of an earlier,
//!    killed run);
//! 3. sends SIGTERM to every process still reparented to `dev` (a runtime
//!    that escaped the driver, the workload of a runtime killed hard);
//!    waits up to [`ADOPTED_GRACE`]; SIGKILLs and reaps those still
//!    running; and repeats while any is left.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use local_cluster::process::{log_to, ProcessSet};
use tokio::time::Instant;

use super::runtimes::{self, Runtimes};
use crate::CliError;

/// How long a gateway or supervisor gets to exit after SIGTERM: a
/// gateway's own bounded stop (`gateway_plugin::server::STOP_BOUND`, 9 s)
/// and a second. Normally all are gone within about 2 s: the leader's
/// hand-over to a follower that stops at the same moment is abandoned once
/// that follower falls silent (1 s), and each supervisor exits a second
/// after its last gateway left. A process still running at this bound
/// missed its own bound and is SIGKILLed ("killed NAME").
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How long a runtime gets to exit after SIGTERM: it stops its workload
/// first (SIGTERM to the workload's group, SIGKILL 2 s later).
pub const ADOPTED_GRACE: Duration = Duration::from_secs(5);

/// Rounds of step 3 of [`Children::stop`]: runtimes, then the workloads of
/// runtimes that had to be killed, then a spare.
const ADOPTED_ROUNDS: usize = 3;

/// Marks this process a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`):
/// orphans among its descendants are reparented to it instead of to init.
///
/// # Errors
/// The OS error of `prctl`.
#[cfg(target_os = "linux")]
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Elsewhere there are no subreapers: runtimes outlive `dev`.
#[cfg(not(target_os = "linux"))]
pub fn become_subreaper() -> std::io::Result<()> {
    Ok(())
}

/// The processes `dev` spawned, by name (a [`ProcessSet`]: killed if
/// dropped unstopped, after an error on the way up).
#[derive(Default)]
pub struct Children {
    /// What `dev` spawned.
    spawned: ProcessSet,
    /// The runtimes [`Children::stop`] deletes (none: only descendants).
    runtimes: Option<Runtimes>,
}

impl Children {
    /// No process yet; [`Children::stop`] will also delete the runtimes of
    /// `runtimes`.
    pub fn with_runtimes(runtimes: Runtimes) -> Self {
        Children {
            spawned: ProcessSet::default(),
            runtimes: Some(runtimes),
        }
    }

    /// Starts `bin args` as `name`, its stdout and stderr appended to `log`.
    ///
    /// # Errors
    /// [`CliError::Local`] when the log cannot be opened or the binary not
    /// started.
    pub fn spawn(
        &mut self,
        name: String,
        bin: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<(), CliError> {
        let mut command = Command::new(bin);
        // A group of its own: a terminal's Ctrl-C reaches `dev` alone,
        // which stops its processes in order with one SIGTERM each (in
        // dev's group they got the SIGINT too, then dev's SIGTERM as a
        // second signal, and exited at once, skipping their bounded stop).
        command.args(args).process_group(0);
        log_to(&mut command, log).map_err(|e| CliError::Local(e.to_string()))?;
        self.spawned
            .spawn(&name, &mut command)
            .map_err(|e| CliError::Local(format!("{e} ({})", bin.display())))
    }

    /// Says on stderr when a process `dev` started exits while the cluster
    /// runs (say, a gateway stopped by hand to try a failover), and reaps
    /// it, so it does not linger as a zombie; reaps the runtimes reparented
    /// to `dev` that exit too. Never returns.
    pub async fn report_exits(&mut self) {
        loop {
            for (name, status) in self.spawned.take_exited() {
                eprintln!("{name} exited ({status}); the others keep running, Ctrl-C stops them");
            }
            let spawned: Vec<u32> = self
                .spawned
                .pids()
                .into_iter()
                .filter_map(|pid| u32::try_from(pid).ok())
                .collect();
            for pid in adopted() {
                if !spawned.contains(&pid) && is_zombie(pid) {
                    reaped(pid);
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Stops every process `dev` started, directly or through its
    /// gateways (see the module doc), and returns once none is left.
    pub async fn stop(&mut self) {
        let mut spawned = std::mem::take(&mut self.spawned);
        let killed = tokio::task::spawn_blocking(move || spawned.stop(STOP_GRACE))
            .await
            .unwrap_or_default();
        for name in killed {
            eprintln!("killed {name}");
        }
        if let Some(runtimes) = &self.runtimes {
            let deleted = runtimes::delete_all(runtimes).await;
            if deleted > 0 {
                eprintln!("deleted {deleted} sandbox runtime(s)");
            }
        }
        for _ in 0..ADOPTED_ROUNDS {
            let adopted = adopted();
            if adopted.is_empty() {
                break;
            }
            stop_adopted(adopted).await;
        }
    }
}

/// SIGTERM to each of `pids` (children reparented to this process), up to
/// [`ADOPTED_GRACE`] for them to exit, then SIGKILL; each is reaped.
async fn stop_adopted(mut pids: Vec<u32>) {
    for pid in &pids {
        signal(*pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + ADOPTED_GRACE;
    while !pids.is_empty() && Instant::now() < deadline {
        pids.retain(|pid| !reaped(*pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for pid in &pids {
        signal(*pid, libc::SIGKILL);
    }
    // A SIGKILLed process is gone at once; reap it (bounded, in case the
    // kernel is slow to tear it down).
    let deadline = Instant::now() + Duration::from_secs(2);
    while !pids.is_empty() && Instant::now() < deadline {
        pids.retain(|pid| !reaped(*pid));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `sig` to the process `pid` (never to a group: a pid that does not
/// fit a positive `pid_t` is ignored).
fn signal(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pid > 0 {
        // SAFETY: kill(2) with a positive pid signals that one process.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Reaps `pid` if it exited; true when it is gone (reaped now, or not a
/// child of this process any more).
fn reaped(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    let mut status = 0;
    // SAFETY: waitpid(2) on one positive pid with a valid status pointer.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    rc != 0
}

/// The pids of this process's children that it did not spawn through
/// [`Children`] (all of those are reaped when this runs): processes
/// reparented to it as a subreaper. Read from `/proc/<pid>/stat`.
fn adopted() -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| parent_of(*pid) == Some(me))
        .collect()
}

/// Whether `pid` exited and waits to be reaped (state `Z` in
/// `/proc/<pid>/stat`).
fn is_zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    stat.rfind(')')
        .and_then(|at| stat[at + 1..].split_whitespace().next())
        == Some("Z")
}

/// The parent pid of `pid`: the fourth field of `/proc/<pid>/stat`, counted
/// after the command name (which may hold spaces and parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_of_this_process_is_read_from_proc() {
        let me = std::process::id();
        // SAFETY: getppid has no arguments.
        let parent = unsafe { libc::getppid() };
        assert_eq!(parent_of(me), u32::try_from(parent).ok());
    }

    // The child is reaped by `stop` (waitpid), which clippy cannot see.
    #[allow(clippy::zombie_processes)]
    #[tokio::test]
    async fn an_adopted_child_is_stopped_and_reaped() {
        // A child spawned outside `Children` (std, not tokio) stands in for
        // a runtime reparented to `dev`.
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap_or_else(|e| panic!("spawn sleep: {e}"));
        let pid = child.id();
        assert!(adopted().contains(&pid));
        Children::default().stop().await;
        assert!(!adopted().contains(&pid));
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}
