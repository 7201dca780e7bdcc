//! Pool members as real processes: each one an `openshell-supervisor` in the
//! run's members namespace ([`crate::net::Net::add_members_namespace`]),
//! attached to the gateways over the bridge. A supervisor starts one
//! `openshell-sandbox-runtime` per sandbox it launches, in the same
//! namespace; runtimes outlive a killed supervisor, as workloads must, and
//! are found by the next owner through the shared runtime directory
//! `<run>/runtimes/` (`<sandbox>.addr`; each runtime logs to
//! `<sandbox>.log`, parsed after the run by
//! [`super::runtime_log::runtime_logs`]: runtimes started and grants
//! accepted).
//!
//! Faults are real signals: pause is SIGSTOP/SIGCONT, kill is `kill -9`
//! followed by a restart (a new process, which the pool gives the next
//! incarnation in log order). A supervisor whose incarnation the pool
//! retired (it was silent past the TTL) re-joins as a new incarnation by
//! itself.
//!
//! The runtimes linger 2 s after their workload stops (instead of 5
//! minutes), so a long run does not pile up finished runtimes.

use std::path::PathBuf;
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
            // The supervisor is secure by default; the harness runs it as
            // before (no credential, grant key learned from the gateway).
            .arg("--insecure")
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
