//! Pool members as real processes: each one an `openshell-supervisor` in the
//! run's members namespace ([`crate::net::Net::add_members_namespace`]),
//! attached to the gateways over the bridge. Supervisors never start
//! runtimes: the gateway that leads raft launches one
//! `openshell-sandbox-runtime` per sandbox generation through its process
//! driver (docs/design/0003-sandbox-driver.md), whose directory
//! `<run>/runtimes/` all gateways of the run share, and which runs every
//! runtime in the members namespace too (`--process-runtime-netns`,
//! listening on the namespace's address at a port it binds: see
//! [`MemberHost::sandbox_driver`] and jepsen/README.md for why). So a
//! runtime outlives a killed, paused or partitioned gateway like a Pod
//! outlives its launcher, and any supervisor reaches it over the members
//! namespace's own address. Each runtime logs to
//! `<run>/runtimes/<name>/runtime.log`, kept by
//! [`super::runtime_log::keep_logs`] and parsed after the run (runtimes
//! started and grants accepted).
//!
//! Faults are real signals: pause is SIGSTOP/SIGCONT, kill is `kill -9`
//! followed by a restart (a new process, which the pool gives the next
//! incarnation in log order). A supervisor whose incarnation the pool
//! retired (it was silent past the TTL) re-joins as a new incarnation by
//! itself.
//!
//! In a secure run each supervisor verifies the gateways against the run's
//! CA (`--tls-ca-file`), presents its own member's credential
//! (`--credential-file`) and trusts only the run's grant key
//! (`--trusted-grant-keys-file`); the runtimes trust the keys the launcher
//! gives them (the cluster's). In an `--insecure` run it is started
//! `--insecure`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::bail;

use crate::security::MemberSecurity;
use local_cluster::gateway::SandboxDriverSection;
use local_cluster::process::{in_namespace, log_to, ChildProcess};
use local_cluster::supervisor::{SupervisorSecurity, SupervisorSpec};

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
    /// The run directory (supervisor logs `s<i>.log`, the driver's
    /// `runtimes/`, the kept `runtime-logs/`).
    pub dir: PathBuf,
    /// TLS and credential of a secure run (`None`: plaintext, no
    /// credential).
    pub security: Option<MemberSecurity>,
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

    /// The gateways' process-driver directory, shared by all of them.
    pub fn runtime_dir(&self) -> PathBuf {
        self.dir.join(super::runtime_log::DRIVER_DIR)
    }

    /// Where the runtimes' logs are kept ([`super::runtime_log::keep_logs`]).
    pub fn runtime_logs_dir(&self) -> PathBuf {
        self.dir.join(super::runtime_log::LOGS_DIR)
    }

    /// The sandbox driver that makes every gateway, when it leads, launch
    /// runtimes with the process driver over [`MemberHost::runtime_dir`],
    /// into the members namespace at its address.
    pub fn sandbox_driver(&self) -> SandboxDriverSection {
        SandboxDriverSection {
            kind: Some("process".into()),
            process_dir: Some(self.runtime_dir()),
            runtime_bin: Some(self.runtime_bin.clone()),
            process_runtime_netns: Some(self.ns.clone()),
            process_runtime_ip: Some(self.ip.clone()),
            ..SandboxDriverSection::default()
        }
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
        let mut spec = SupervisorSpec::new(&self.member, h.gateways.clone());
        spec.advertise_ip = h.ip.clone();
        spec.capacity = Some(self.capacity);
        spec.security = match &h.security {
            Some(security) => SupervisorSecurity {
                tls_ca_file: Some(security.ca_file.clone()),
                trusted_keys_file: Some(security.trusted_keys_file.clone()),
                credential_file: security.of(&self.member).map(Into::into),
                ..SupervisorSecurity::default()
            },
            // The supervisor is secure by default; an `--insecure` run's
            // supervisors run as before (no credential, plaintext, grant key
            // learned from the gateway).
            None => SupervisorSecurity {
                insecure: true,
                ..SupervisorSecurity::default()
            },
        };
        let mut cmd = in_namespace(&h.ns, &h.supervisor_bin);
        cmd.args(spec.args());
        cmd.env("RUST_LOG", "info");
        log_to(&mut cmd, &h.dir.join(format!("{}.log", self.member)))?;
        self.child
            .spawn(&mut cmd, &h.supervisor_bin.display().to_string())?;
        Ok(())
    }

    /// `kill -9`; the runtimes it watched keep running.
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
