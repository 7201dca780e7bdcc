//! The workload process: spawn in its own process group, learn the demo
//! workload's address, read the process start time, stop it (SIGTERM to the
//! group, SIGKILL after a grace period).

use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::process::{Child, Command};

use super::RuntimeError;

/// Grace between SIGTERM and SIGKILL when stopping the workload.
pub const STOP_GRACE: Duration = Duration::from_millis(2000);

/// How long the demo workload may take to publish its address.
const DEMO_ADDR_WAIT: Duration = Duration::from_secs(10);

/// The workload a runtime holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    /// The built-in demo workload: `<current exe> demo-workload`, an
    /// in-memory counter served over TCP.
    Demo,
    /// Any command: program and arguments.
    Command(Vec<String>),
}

/// What the runtime reports about its workload process.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    pub pid: u32,
    pub started_at_unix_ms: u64,
    pub addr: String,
}

/// Sets `PR_SET_PDEATHSIG` so that the child dies with the thread that
/// spawned it (the runtime), and puts nothing else in the pre-exec hook.
fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the hook runs between fork and exec and calls only
    // async-signal-safe functions (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent died between fork and prctl: do not outlive it.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::other(
                    "runtime exited before the workload started",
                ));
            }
            Ok(())
        });
    }
}

/// A command in its own process group that dies with the runtime.
pub(crate) fn isolated_command(program: &Path, args: &[String]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).process_group(0);
    die_with_parent(&mut cmd);
    cmd
}

/// Spawns the workload. Must be called from a thread that lives as long as
/// the runtime (the parent-death signal follows the spawning thread).
pub(crate) async fn spawn(
    workload: &Workload,
    sandbox_id: &str,
    exe: &Path,
) -> Result<(Child, Facts), RuntimeError> {
    let demo_addr_file = match workload {
        Workload::Demo => Some(std::env::temp_dir().join(format!(
            "openshell-sandbox-runtime-{}-{:016x}.workload-addr",
            std::process::id(),
            rand::random::<u64>()
        ))),
        Workload::Command(_) => None,
    };
    let mut cmd = match (workload, &demo_addr_file) {
        (Workload::Command(argv), _) => {
            let (program, args) = argv
                .split_first()
                .ok_or_else(|| RuntimeError::Workload("empty workload command".into()))?;
            isolated_command(Path::new(program), args)
        }
        (Workload::Demo, file) => {
            let mut args = vec!["demo-workload".to_string(), "--addr-file".to_string()];
            args.extend(file.iter().map(|f| f.display().to_string()));
            isolated_command(exe, &args)
        }
    };
    cmd.env("OPENSHELL_SANDBOX_ID", sandbox_id);
    let spawned_at = unix_ms_now();
    let mut child = cmd
        .spawn()
        .map_err(|e| RuntimeError::Workload(format!("cannot start the workload: {e}")))?;
    let pid = child
        .id()
        .ok_or_else(|| RuntimeError::Workload("workload exited at once".into()))?;
    let started_at_unix_ms = process_start_unix_ms(pid).unwrap_or(spawned_at);
    let addr = match demo_addr_file {
        Some(file) => {
            let addr = wait_for_addr(&mut child, &file).await;
            let _ = std::fs::remove_file(&file);
            match addr {
                Ok(addr) => addr,
                Err(e) => {
                    kill_group(pid, libc::SIGKILL);
                    let _ = child.wait().await;
                    return Err(e);
                }
            }
        }
        None => String::new(),
    };
    Ok((
        child,
        Facts {
            pid,
            started_at_unix_ms,
            addr,
        },
    ))
}

async fn wait_for_addr(child: &mut Child, file: &PathBuf) -> Result<String, RuntimeError> {
    let until = Instant::now() + DEMO_ADDR_WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            let text = text.trim();
            if !text.is_empty() {
                return Ok(text.to_string());
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(RuntimeError::Workload(format!(
                "demo workload exited before serving: {status}"
            )));
        }
        if Instant::now() > until {
            return Err(RuntimeError::Workload(format!(
                "demo workload did not publish its address within {DEMO_ADDR_WAIT:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `signal` to the process group `pgid` (ignores a vanished group).
pub(crate) fn kill_group(pgid: u32, signal: libc::c_int) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: plain syscall; a negative pid addresses the process group.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// Stops the workload: SIGTERM to its group, SIGKILL after [`STOP_GRACE`],
/// then reaps it.
pub(crate) async fn stop(child: &mut Child, pid: u32) -> io::Result<ExitStatus> {
    kill_group(pid, libc::SIGTERM);
    let status = match tokio::time::timeout(STOP_GRACE, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            tracing::warn!(
                pid,
                "workload ignored SIGTERM for {STOP_GRACE:?}; sending SIGKILL"
            );
            kill_group(pid, libc::SIGKILL);
            child.wait().await
        }
    };
    // Stragglers of the group that survived the leader.
    kill_group(pid, libc::SIGKILL);
    status
}

fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The start time of process `pid` in ms since the Unix epoch, from
/// `/proc/<pid>/stat` field 22 (clock ticks after boot) and `/proc/stat`
/// `btime`. `None` when either is unreadable.
pub fn process_start_unix_ms(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields
    // resume after the last ')', starting with field 3.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let start_ticks: u64 = rest.split_whitespace().nth(22 - 3)?.parse().ok()?;
    let btime: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|h| *h > 0)?;
    btime
        .checked_mul(1000)?
        .checked_add(start_ticks.checked_mul(1000)? / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_in_the_past_and_stable() {
        let pid = std::process::id();
        let a = process_start_unix_ms(pid);
        assert!(a.is_some());
        assert_eq!(a, process_start_unix_ms(pid));
        assert!(a.unwrap_or(u64::MAX) <= unix_ms_now());
        assert_eq!(process_start_unix_ms(u32::MAX), None);
    }
}
