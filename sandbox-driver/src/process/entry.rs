//! One runtime's directory `<dir>/<name>/` (the process driver's record of
//! it, as a Pod object is the Kubernetes driver's): writing its files and
//! reading its state back. Reading is cheap: files, `/proc/<pid>/cmdline`,
//! no network.

use std::ffi::OsStr;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{unavailable, ENTRY_ADDRESS, ENTRY_CA, ENTRY_LOG, ENTRY_PID, ENTRY_SPEC};
use crate::DriverError;
use crate::{Endpoint, RuntimeState};

/// A directory whose creator has written no `pid` for this long is a failed
/// create (its gateway died mid-create, or the create failed without
/// cleaning up).
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(10);

/// How much of the end of `runtime.log` is read for its last line.
const LOG_TAIL: u64 = 16 * 1024;

/// `spec.json`: what the runtime runs for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecFile {
    /// Sandbox id.
    pub sandbox_id: String,
    /// Sandbox generation.
    pub generation: u64,
}

/// Writes `contents` to `path` through a temporary file and a rename, so a
/// reader sees all of it or nothing; the file gets mode `mode`.
///
/// # Errors
/// [`DriverError::Unavailable`] naming the file.
pub fn write_atomically(path: &Path, contents: &[u8], mode: u32) -> Result<(), DriverError> {
    let file_name = path.file_name().and_then(OsStr::to_str).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{file_name}.tmp"));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(contents)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|e| unavailable(format!("{}: {e}", path.display())))
}

/// The entry's `spec.json`, if it is there and parses.
pub fn read_spec(entry: &Path) -> Option<SpecFile> {
    let text = std::fs::read(entry.join(ENTRY_SPEC)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// The pid the entry records, if any.
pub fn read_pid(entry: &Path) -> Option<i32> {
    std::fs::read_to_string(entry.join(ENTRY_PID))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A trimmed, non-empty one-line file of the entry.
pub fn read_line(entry: &Path, file: &str) -> Option<String> {
    let text = std::fs::read_to_string(entry.join(file)).ok()?;
    let line = text.trim();
    (!line.is_empty()).then(|| line.to_string())
}

/// Whether a recorded pid is the runtime, as `/proc` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Alive, and its command line names the runtime and its sandbox.
    Ours,
    /// Alive with an empty command line, not a kernel thread: in the
    /// middle of `execve` (the new image's arguments are not mapped yet).
    Exec,
    /// Gone, a zombie, or another process (a reused pid).
    Gone,
}

/// `PF_KTHREAD` in `/proc/<pid>/stat`'s flags.
const PF_KTHREAD: u64 = 0x0020_0000;

/// The largest part of a `/proc/<pid>` file read: a runtime's command line
/// is a few hundred bytes, and its first arguments name the runtime and the
/// sandbox (`runtime_args` puts `--sandbox-id` first), so a longer one cut
/// here still reads right.
const PROC_READ_MAX: usize = 16 * 1024;

/// `path` (a `/proc/<pid>` file) as one `read` call returns it. The kernel
/// answers one call from one image of the process, so a process in
/// `execve` reads as its old or its new command line, never as a mix:
/// `std::fs::read` reads 32 bytes first and the rest in further calls, and
/// across an `execve` that gave the first 32 bytes of `ip netns exec`'s
/// arguments and then an end of file (issue 27, sandbox-driver t04).
fn read_proc_once(path: &str) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; PROC_READ_MAX];
    let n = file.read(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Whether `pid` is alive and is the runtime of `sandbox_id`: its command
/// line names an executable called `runtime_file` (directly, or as the
/// program of `ip netns exec`) and `--sandbox-id <sandbox_id>`.
pub fn liveness(pid: i32, sandbox_id: &str, runtime_file: &OsStr) -> Liveness {
    let Ok(cmdline) = read_proc_once(&format!("/proc/{pid}/cmdline")) else {
        return Liveness::Gone;
    };
    if cmdline.is_empty() {
        return if execing(pid) {
            Liveness::Exec
        } else {
            Liveness::Gone
        };
    }
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let names_runtime = args.iter().any(|arg| {
        Path::new(OsStr::new(std::str::from_utf8(arg).unwrap_or_default())).file_name()
            == Some(runtime_file)
    });
    let names_sandbox = args
        .windows(2)
        .any(|w| w[0] == b"--sandbox-id" && w[1] == sandbox_id.as_bytes());
    if names_runtime && names_sandbox {
        Liveness::Ours
    } else {
        Liveness::Gone
    }
}

/// Whether `pid`, whose command line reads empty, is a live user process
/// (so in `execve`) rather than a zombie, a dead one or a kernel thread.
fn execing(pid: i32) -> bool {
    let Ok(stat) = read_proc_once(&format!("/proc/{pid}/stat")) else {
        return false;
    };
    let stat = String::from_utf8_lossy(&stat);
    // After the command name's closing parenthesis: state, ppid, pgrp,
    // session, tty_nr, tpgid, flags.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first().copied().unwrap_or("X");
    let flags: u64 = fields
        .get(6)
        .and_then(|f| f.parse().ok())
        .unwrap_or(PF_KTHREAD);
    !matches!(state, "Z" | "X" | "x") && flags & PF_KTHREAD == 0
}

/// [`liveness`] is [`Liveness::Ours`].
pub fn is_ours(pid: i32, sandbox_id: &str, runtime_file: &OsStr) -> bool {
    liveness(pid, sandbox_id, runtime_file) == Liveness::Ours
}

/// The last line of the entry's `runtime.log` that says something (not
/// empty, not a command-line usage or hint line).
pub fn last_log_line(entry: &Path) -> String {
    let path = entry.join(ENTRY_LOG);
    let read = || -> std::io::Result<String> {
        let mut file = std::fs::File::open(&path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL)))?;
        let mut tail = Vec::new();
        file.read_to_end(&mut tail)?;
        Ok(String::from_utf8_lossy(&tail).into_owned())
    };
    // A command-line error ends with clap's usage and hint lines: the
    // `error:` line above them says what is wrong.
    let says_something = |l: &&str| {
        !(l.is_empty()
            || l.starts_with("For more information")
            || l.starts_with("Usage:")
            || l.starts_with("tip:"))
    };
    match read() {
        Ok(tail) => tail
            .lines()
            .map(str::trim)
            .rfind(says_something)
            .map_or_else(
                || format!("no output in {}", path.display()),
                ToString::to_string,
            ),
        Err(e) => format!("{}: {e}", path.display()),
    }
}

/// How long since the entry directory last changed (a file was added).
fn quiet_for(entry: &Path) -> Duration {
    std::fs::metadata(entry)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .unwrap_or_default()
}

/// The state of runtime `name` (of `sandbox_id`) from its entry:
/// - no `pid` yet: `Pending("starting")`, or `Failed` once the directory
///   has been quiet for [`CREATE_TIMEOUT`];
/// - `pid` not alive or not ours: `Failed("runtime exited: <last log
///   line>")`; in `execve` (no command line yet): `Pending("starting")`;
/// - alive, no `address` yet (the runtime writes it once it serves):
///   `Pending("starting")`;
/// - alive and serving: `Running` with `address` and `ca.crt`.
pub fn observe(entry: &Path, name: &str, sandbox_id: &str, runtime_file: &OsStr) -> RuntimeState {
    let Some(pid) = read_pid(entry) else {
        if quiet_for(entry) > CREATE_TIMEOUT {
            return RuntimeState::Failed {
                reason: format!(
                    "launch did not complete: no runtime process after {} s (the creating gateway stopped mid-create?)",
                    CREATE_TIMEOUT.as_secs()
                ),
            };
        }
        return starting();
    };
    match liveness(pid, sandbox_id, runtime_file) {
        Liveness::Ours => {}
        Liveness::Exec => return starting(),
        Liveness::Gone => {
            return RuntimeState::Failed {
                reason: format!("runtime exited: {}", last_log_line(entry)),
            }
        }
    }
    let Some(address) = read_line(entry, ENTRY_ADDRESS) else {
        return starting();
    };
    match std::fs::read_to_string(entry.join(ENTRY_CA)) {
        Ok(ca_pem) => RuntimeState::Running(Endpoint {
            name: name.to_string(),
            address,
            ca_pem,
        }),
        Err(e) => RuntimeState::Failed {
            reason: format!("{}: {e}", entry.join(ENTRY_CA).display()),
        },
    }
}

fn starting() -> RuntimeState {
    RuntimeState::Pending {
        detail: "starting".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_log_line_skips_usage_hints() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(
            dir.path().join(ENTRY_LOG),
            "error: unexpected argument '--x' found\n\n  tip: to pass '--x' as a value, use '-- --x'\n\nUsage: openshell-sandbox-runtime [OPTIONS]\n\nFor more information, try '--help'.\n",
        )
        .expect("write");
        assert_eq!(
            last_log_line(dir.path()),
            "error: unexpected argument '--x' found"
        );
        std::fs::write(
            dir.path().join(ENTRY_LOG),
            "INFO started\nopenshell-sandbox-runtime: cannot listen on 127.0.0.1:1: Permission denied\n",
        )
        .expect("write");
        assert!(last_log_line(dir.path()).contains("cannot listen"));
        assert_eq!(liveness(i32::MAX, "x", OsStr::new("rt")), Liveness::Gone);
        // This test process is alive but not a runtime.
        assert_eq!(
            liveness(std::process::id() as i32, "x", OsStr::new("rt")),
            Liveness::Gone
        );
    }
}
