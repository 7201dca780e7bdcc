//! The sandbox runtimes the gateways of a test cluster launch through the
//! process driver (`--sandbox-driver process`, its directory
//! `<cluster root>/runtimes`): reading an entry the way an operator would
//! (`<dir>/<name>/{spec.json,pid,address,ca.crt,netns,runtime.log}`,
//! `sandbox-driver/src/process.rs`), a client to a runtime verified as a
//! supervisor verifies it, and the clean-up that kills the runtimes and
//! removes their network namespaces when a cluster is dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use proto::client::{ClientConfig, Role};
use proto::sandbox_runtime::sandbox_runtime_client::SandboxRuntimeClient;
use tonic::transport::Channel;

use crate::TestResult;

/// One runtime of the process driver's directory.
#[derive(Clone, Debug)]
pub struct RuntimeEntry {
    /// Its directory, `<dir>/<name>`.
    pub dir: PathBuf,
    /// The runtime name (a DNS label; the name on its certificate).
    pub name: String,
    /// Sandbox id.
    pub sandbox_id: String,
    /// Sandbox generation.
    pub generation: u64,
}

impl RuntimeEntry {
    /// The runtime's pid, once spawned.
    pub fn pid(&self) -> Option<u32> {
        self.read("pid")?.parse().ok()
    }

    /// `ip:port`, once it serves.
    pub fn address(&self) -> Option<String> {
        self.read("address")
    }

    /// The network namespace it runs in, if any.
    pub fn netns(&self) -> Option<String> {
        self.read("netns")
    }

    /// The CA certificate (PEM) its certificate chains to.
    pub fn ca_pem(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.join("ca.crt")).ok()
    }

    /// What the runtime logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("runtime.log")).unwrap_or_default()
    }

    fn read(&self, file: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.dir.join(file)).ok()?;
        let text = text.trim();
        (!text.is_empty()).then(|| text.to_string())
    }
}

/// Every runtime entry under `dir`, ordered by (sandbox, generation).
pub fn entries(dir: &Path) -> Vec<RuntimeEntry> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut entries: Vec<RuntimeEntry> = read
        .flatten()
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path().join("spec.json")).ok()?;
            let spec: serde_json::Value = serde_json::from_str(&text).ok()?;
            Some(RuntimeEntry {
                dir: e.path(),
                name: e.file_name().to_string_lossy().into_owned(),
                sandbox_id: spec.get("sandbox_id")?.as_str()?.to_string(),
                generation: spec.get("generation")?.as_u64()?,
            })
        })
        .collect();
    entries.sort_by(|a, b| (&a.sandbox_id, a.generation).cmp(&(&b.sandbox_id, b.generation)));
    entries
}

/// The entries of `sandbox` under `dir` (every generation, oldest first).
pub fn entries_of(dir: &Path, sandbox: &str) -> Vec<RuntimeEntry> {
    entries(dir)
        .into_iter()
        .filter(|e| e.sandbox_id == sandbox)
        .collect()
}

/// The newest generation's entry of `sandbox` under `dir`.
///
/// # Errors
/// When the driver launched no runtime for it.
pub fn entry_of(dir: &Path, sandbox: &str) -> TestResult<RuntimeEntry> {
    entries_of(dir, sandbox)
        .pop()
        .ok_or_else(|| format!("no runtime of {sandbox} under {}", dir.display()).into())
}

/// A client to the runtime `entry` at its address, over TLS verified with
/// its CA for its name, as a supervisor dials it.
///
/// # Errors
/// No address or CA yet, or the connection failed.
pub async fn client(entry: &RuntimeEntry) -> TestResult<SandboxRuntimeClient<Channel>> {
    let addr = entry
        .address()
        .ok_or_else(|| format!("runtime {} has no address yet", entry.name))?;
    let ca = entry
        .ca_pem()
        .ok_or_else(|| format!("runtime {} has no ca.crt", entry.name))?;
    let tls = proto::tls::ClientTls::from_ca_pem(&ca)?.with_server_name(entry.name.clone());
    let config = ClientConfig::for_role(Role::SupervisorToRuntime).with_tls(Some(tls));
    let channel = proto::client::connect(Role::SupervisorToRuntime, &addr, &config).await?;
    Ok(SandboxRuntimeClient::new(channel))
}

/// Kills every runtime under `dir` (its process group) and removes the
/// network namespaces they ran in (their veth pairs go with them). For
/// test clean-up; errors are ignored (already gone).
pub fn cleanup(dir: &Path) {
    for entry in entries(dir) {
        if let Some(pid) = entry.pid() {
            // SAFETY: plain signal sends to a pid / process group we read.
            unsafe {
                libc::kill(-(pid as i32), libc::SIGKILL);
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
        if let Some(ns) = entry.netns() {
            let _ = Command::new("ip")
                .args(["netns", "pids", &ns])
                .output()
                .map(|out| {
                    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                        if let Ok(pid) = pid.parse::<i32>() {
                            // SAFETY: as above.
                            unsafe {
                                libc::kill(pid, libc::SIGKILL);
                            }
                        }
                    }
                });
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
    }
}

/// Moves the calling OS thread into network namespace `ns` (`ip netns`
/// name): its sockets then reach what listens inside, e.g. a demo workload
/// on the namespace's 127.0.0.1. Call it on a thread of its own (a
/// `std::thread`), never on an async runtime's worker.
///
/// # Errors
/// The namespace does not exist or `setns` was refused.
pub fn enter_netns(ns: &str) -> TestResult {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(Path::new("/run/netns").join(ns))?;
    // SAFETY: setns on a descriptor we own, for this thread only.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns {ns}: {}", std::io::Error::last_os_error()).into());
    }
    Ok(())
}
