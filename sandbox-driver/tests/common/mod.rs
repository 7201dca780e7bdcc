//! What the process-driver tests that need a network namespace share.
// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::net::Ipv4Addr;

use proto::grant::GrantSigner;
use sandbox_driver::process::{NetnsMode, ProcessConfig, ProcessDriver, SharedNetns};
use sandbox_driver::LaunchSpec;

/// The shared namespace and its veth; removed (processes killed first) on
/// drop.
pub struct Shared {
    pub name: String,
    pub host_link: String,
    pub dir: tempfile::TempDir,
}

pub fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Shared {
    /// `<tag>-<pid>` with `10.215.<a>.<b+2>/30` inside (a /30 per test
    /// process and `subnet`), `.1` on our side.
    pub fn new(tag: &str, subnet: u32) -> (Shared, Ipv4Addr) {
        let pid = std::process::id();
        let name = format!("{tag}-{pid}");
        let host_link = format!("{tag}h{pid}");
        let index = (pid * 2 + subnet) % (1 << 14);
        let base = u32::from_be_bytes([10, 215, 0, 0]) + 4 * index;
        let (host_ip, ns_ip) = (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2));
        let shared = Shared {
            name: name.clone(),
            host_link: host_link.clone(),
            dir: tempfile::tempdir().expect("tempdir"),
        };
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        ip(&[
            "link", "add", &host_link, "type", "veth", "peer", "name", "eth0", "netns", &name,
        ]);
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &host_link]);
        ip(&["link", "set", &host_link, "up"]);
        ip(&[
            "-n",
            &name,
            "addr",
            "add",
            &format!("{ns_ip}/30"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &name, "link", "set", "eth0", "up"]);
        (shared, ns_ip)
    }

    pub fn pids(&self) -> Vec<i32> {
        let out = std::process::Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
            .expect("ip netns pids");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        for pid in self.pids() {
            // SAFETY: plain syscalls.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.host_link])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

impl Shared {
    /// A process driver under this namespace's directory that runs every
    /// runtime in it, at `ns_ip`.
    pub fn driver(&self, ns_ip: Ipv4Addr) -> ProcessDriver {
        ProcessDriver::new(ProcessConfig {
            dir: self.dir.path().join("driver"),
            runtime_bin: testkit::bins::runtime_bin(),
            netns: NetnsMode::Auto,
        })
        .expect("driver")
        .with_shared_netns(SharedNetns {
            name: self.name.clone(),
            ip: ns_ip,
        })
        .expect("shared namespace")
    }
}

/// Generation 1 of sandbox `id`, trusting the development key `tag`.
pub fn spec(tag: &str, id: &str) -> LaunchSpec {
    LaunchSpec {
        sandbox_id: id.to_string(),
        generation: 1,
        workload: Vec::new(),
        recovery_deadline_ms: 600_000,
        trusted_grant_keys: vec![GrantSigner::insecure_development_key(tag).public_key_hex()],
        trusted_grant_keys_file: None,
    }
}
