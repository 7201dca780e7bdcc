//! Pool members as real processes: each one an `openshell-supervisor` in the
//! run's members namespace ([`crate::net::Net::add_members_namespace`]),
//! attached to the gateways over the bridge. A supervisor starts one
//! `openshell-sandbox-runtime` per sandbox it launches, in the same
//! namespace; runtimes outlive a killed supervisor, as workloads must, and
//! are found by the next owner through the shared runtime directory
//! `<run>/runtimes/` (`<sandbox>.addr`; each runtime logs to
//! `<sandbox>.log`, parsed after the run by [`runtime_logs`]: runtimes
//! started and grants accepted).
//!
//! Faults are real signals: pause is SIGSTOP/SIGCONT, kill is `kill -9`
//! followed by a restart (a new incarnation: the process's start time in
//! ms). A supervisor whose incarnation the pool retired (it was silent past
//! the TTL) re-joins as a new incarnation by itself.
//!
//! The runtimes linger 2 s after their workload stops (instead of 5
//! minutes), so a long run does not pile up finished runtimes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::bail;

use crate::process::{in_namespace, log_to, ChildProcess};

/// What every process member shares: where it runs and what it starts.
#[derive(Clone, Debug)]
pub struct MemberHost {
    /// The members namespace.
    pub ns: String,
    /// Its address on the bridge (the supervisors' advertise address).
    pub ip: String,
    /// Gateway endpoints, `ip:port`.
    pub gateways: Vec<String>,
    /// `openshell-supervisor`.
    pub supervisor_bin: PathBuf,
    /// `openshell-sandbox-runtime`.
    pub runtime_bin: PathBuf,
    /// The run directory (supervisor logs `s<i>.log`, `runtimes/`).
    pub dir: PathBuf,
}

impl MemberHost {
    /// Checks that both binaries exist.
    ///
    /// # Errors
    /// Naming the missing binary and how to build it.
    pub fn check(&self) -> anyhow::Result<()> {
        for bin in [&self.supervisor_bin, &self.runtime_bin] {
            if !bin.is_file() {
                bail!(
                    "{} not found; build it first: cargo build -p supervisor (or pass --supervisor-bin / --runtime-bin)",
                    bin.display()
                );
            }
        }
        Ok(())
    }

    /// The shared runtime directory.
    pub fn runtime_dir(&self) -> PathBuf {
        self.dir.join("runtimes")
    }
}

/// One `openshell-supervisor` process.
pub struct ProcessSupervisor {
    member: String,
    capacity: u32,
    host: Arc<MemberHost>,
    child: ChildProcess,
    paused: AtomicBool,
}

impl ProcessSupervisor {
    /// Creates it (not started).
    pub fn new(member: &str, capacity: u32, host: Arc<MemberHost>) -> ProcessSupervisor {
        ProcessSupervisor {
            member: member.to_string(),
            capacity,
            host,
            child: ChildProcess::default(),
            paused: AtomicBool::new(false),
        }
    }

    /// Member id.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// Process id, when running.
    pub fn pid(&self) -> Option<i32> {
        self.child.pid()
    }

    /// Started, not killed, and not exited by itself.
    pub fn is_alive(&self) -> bool {
        self.child.is_running() && !self.child.exited()
    }

    /// Stopped with SIGSTOP.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Starts the process (kills a running one first): a new incarnation.
    ///
    /// # Errors
    /// When it cannot be spawned.
    pub fn restart(&self) -> anyhow::Result<()> {
        self.kill();
        let h = &self.host;
        let mut cmd = in_namespace(&h.ns, &h.supervisor_bin);
        cmd.args(["--gateways", &h.gateways.join(",")])
            .args(["--pool-member-id", &self.member])
            .args(["--pool-member-uid", &format!("uid-{}", self.member)])
            .args(["--pool-advertise-ip", &h.ip])
            .args(["--capacity", &self.capacity.to_string()])
            .arg("--runtime-dir")
            .arg(h.runtime_dir())
            .arg("--runtime-bin")
            .arg(&h.runtime_bin)
            .env("RUST_LOG", "info")
            // Inherited by the runtimes it starts.
            .env("OPENSHELL_RUNTIME_LINGER_MS", "2000");
        log_to(&mut cmd, &h.dir.join(format!("{}.log", self.member)))?;
        self.child
            .spawn(&mut cmd, &h.supervisor_bin.display().to_string())?;
        Ok(())
    }

    /// `kill -9`; its runtimes keep running.
    pub fn kill(&self) {
        self.child.kill9();
        self.paused.store(false, Ordering::Relaxed);
    }

    /// SIGSTOP.
    pub fn pause(&self) {
        if self.child.signal(libc::SIGSTOP).is_ok() {
            self.paused.store(true, Ordering::Relaxed);
        }
    }

    /// SIGCONT.
    pub fn resume(&self) {
        if self.is_paused() {
            let _ = self.child.signal(libc::SIGCONT);
            self.paused.store(false, Ordering::Relaxed);
        }
    }
}

impl Drop for ProcessSupervisor {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What one sandbox's runtimes logged (every runtime of a sandbox appends
/// to `runtimes/<sandbox>.log`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeLog {
    /// Runtimes started (`serving SandboxRuntime` lines).
    pub starts: usize,
    /// Grants the runtimes accepted, in log order (`activated` lines).
    pub activations: Vec<Activation>,
}

/// A grant a runtime accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Activation {
    /// Member named by the grant.
    pub member: String,
    /// Its incarnation.
    pub incarnation: u64,
    /// Ownership term.
    pub term: u64,
    /// Credential epoch.
    pub credential_epoch: u64,
}

/// The line without ANSI colour sequences (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `value` of ` key=value` in a log line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    line[at..].split(char::is_whitespace).next()
}

/// Parses one runtime log.
pub fn parse_runtime_log(text: &str) -> RuntimeLog {
    let mut log = RuntimeLog::default();
    for line in text.lines() {
        let line = strip_ansi(line);
        let line = line.as_str();
        if line.contains("serving SandboxRuntime") {
            log.starts += 1;
        } else if line.contains(" activated") {
            let number = |k: &str| field(line, k).and_then(|v| v.parse::<u64>().ok());
            if let (Some(member), Some(incarnation), Some(term), Some(credential_epoch)) = (
                field(line, "member"),
                number("incarnation"),
                number("term"),
                number("credential_epoch"),
            ) {
                log.activations.push(Activation {
                    member: member.to_string(),
                    incarnation,
                    term,
                    credential_epoch,
                });
            }
        }
    }
    log
}

/// Every sandbox's [`RuntimeLog`], from `runtime_dir/<sandbox>.log`.
pub fn runtime_logs(runtime_dir: &Path) -> BTreeMap<String, RuntimeLog> {
    crate::files_with_suffix(runtime_dir, ".log")
        .into_iter()
        .map(|(sandbox, path)| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            (sandbox, parse_runtime_log(&text))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_logs_are_parsed_with_or_without_colour() {
        let text = "2026-11-29T13:19:34.695864Z  INFO supervisor::runtime: serving SandboxRuntime sandbox=sb32 addr=127.0.0.1:35319
2026-11-29T13:19:34.714752Z  INFO Activate{sandbox=sb32}: supervisor::runtime::service: activated member=s3 incarnation=17 term=1 credential_epoch=1
2026-11-29T13:20:02.028537Z  WARN Activate{sandbox=sb32}: supervisor::runtime::service: refused: credential epoch 2 is older than the current epoch 3 code=PermissionDenied
\u{1b}[2m2026\u{1b}[0m  INFO Activate: activated \u{1b}[3mmember\u{1b}[0m\u{1b}[2m=\u{1b}[0ms4 incarnation=18 term=3 credential_epoch=3\u{1b}[0m
";
        let log = parse_runtime_log(text);
        assert_eq!(log.starts, 1);
        assert_eq!(
            log.activations[0],
            Activation {
                member: "s3".into(),
                incarnation: 17,
                term: 1,
                credential_epoch: 1
            }
        );
        assert_eq!(
            log.activations[1],
            Activation {
                member: "s4".into(),
                incarnation: 18,
                term: 3,
                credential_epoch: 3
            }
        );
        assert_eq!(log.activations.len(), 2, "{log:?}");
    }
}
