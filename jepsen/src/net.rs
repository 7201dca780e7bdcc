//! The test network: one network namespace per node, veth pairs into a
//! bridge in its own switch namespace, and one more veth from the harness
//! (root namespace) into the bridge. Node addresses live in a private /24
//! that exists only inside those namespaces and on the harness veth.
//!
//! ```text
//!  root ns: osj-<run>-h 10.211.X.254 ──┐
//!  osj-<run>-n1: eth0 10.211.X.11 ── n1 ┤ br0 (osj-<run>-sw, nft table `bridge osj`)
//!  osj-<run>-n2: eth0 10.211.X.12 ── n2 ┤
//!  ...                                   ┘
//! ```
//!
//! Faults use the vocabulary shared with the in-memory router (STYLE.md
//! practice 12): [`Net::cut`] drops all traffic between groups (bridge-family
//! nftables rules in the switch namespace), [`Net::isolate`] cuts one node
//! from all others, [`Net::drop`] loses packets at random
//! (`iptables -m statistic` in a node's namespace), [`Net::recover`] heals
//! everything. The harness port of the bridge is never cut: the clients, like
//! Jepsen's control node, always reach every node.
//!
//! Everything is named `osj-<run>-*`; [`clean`] removes every such namespace
//! (killing the processes inside) and link, and is what the Drop guard and
//! the Ctrl-C handler call. A run holds a [`RunLock`] (its harness pid in
//! `/run/openshell-jepsen/<run>.pid`) while it lives, so runs can share a
//! machine: only resources of runs whose harness is gone are leftovers
//! ([`stale_leftovers`]), and `openshell-jepsen clean` removes only those
//! ([`clean_stale`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// Prefix of everything the harness creates.
pub const PREFIX: &str = "osj-";

/// How many extra harness addresses [`Net::add_client_addresses`] gives at
/// most: `10.211.X.100` to `10.211.X.199` (nodes are `.11` and up, the
/// members namespace `.200`, the harness `.254`).
pub const CLIENT_ADDRESSES: usize = 100;

/// Where a live run records its harness pid (`<run>.pid`). On tmpfs, so a
/// reboot forgets every run (and with it every namespace).
pub const RUNS_DIR: &str = "/run/openshell-jepsen";

/// The exact command that removes leftovers by hand.
pub const CLEAN_COMMAND: &str = "openshell-jepsen clean   # or, by hand (this also ends runs in progress): for ns in $(ip netns list | awk '/^osj-/{print $1}'); do ip netns pids $ns | xargs -r kill -9; ip netns del $ns; done; ip -o link show | awk -F': ' '$2 ~ /^osj-/{split($2,a,\"@\"); print a[1]}' | xargs -r -n1 ip link del";

/// Runs a command; its stdout, or an error with its stderr.
///
/// # Errors
/// When the command cannot start or exits non-zero.
pub fn sh(args: &[&str]) -> anyhow::Result<String> {
    let (prog, rest) = args.split_first().context("empty command")?;
    let out = Command::new(prog)
        .args(rest)
        .output()
        .with_context(|| format!("running {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a command in namespace `ns`.
fn nsh(ns: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut full = vec!["ip", "netns", "exec", ns];
    full.extend_from_slice(args);
    sh(&full)
}

/// Names of leftover namespaces and root-namespace links starting with
/// `prefix`, as `netns <name>` / `link <name>`.
pub fn leftovers(prefix: &str) -> Vec<String> {
    resources(prefix)
        .into_iter()
        .map(|(kind, name)| format!("{kind} {name}"))
        .collect()
}

/// `(kind, name)` of every namespace (`netns`) and root-namespace link
/// (`link`) whose name starts with `prefix`.
fn resources(prefix: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Ok(list) = sh(&["ip", "netns", "list"]) {
        for line in list.lines() {
            if let Some(name) = line.split_whitespace().next() {
                if name.starts_with(prefix) {
                    out.push(("netns", name.to_string()));
                }
            }
        }
    }
    if let Ok(links) = sh(&["ip", "-o", "link", "show"]) {
        for line in links.lines() {
            if let Some(name) = link_name(line) {
                if name.starts_with(prefix) {
                    out.push(("link", name.to_string()));
                }
            }
        }
    }
    out
}

/// The run id in a resource name: `osj-ab12cd-n1` -> `ab12cd`.
fn run_of(name: &str) -> Option<&str> {
    name.strip_prefix(PREFIX)?.split('-').next()
}

/// Whether process `pid` exists.
fn pid_alive(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks for existence; no memory is touched.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Run ids whose harness process is alive (from [`RUNS_DIR`]).
pub fn live_runs() -> BTreeSet<String> {
    crate::files_with_suffix(Path::new(RUNS_DIR), ".pid")
        .into_iter()
        .filter(|(_, path)| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok())
                .is_some_and(pid_alive)
        })
        .map(|(run, _)| run)
        .collect()
}

/// Leftovers of runs whose harness is gone (killed, crashed), as
/// `netns <name>` / `link <name>`; resources of live runs are not listed.
pub fn stale_leftovers() -> Vec<String> {
    let live = live_runs();
    resources(PREFIX)
        .into_iter()
        .filter(|(_, name)| run_of(name).is_none_or(|r| !live.contains(r)))
        .map(|(kind, name)| format!("{kind} {name}"))
        .collect()
}

/// Removes the leftovers of every run whose harness is gone, and their pid
/// files; runs still alive are left alone. Returns what it could not remove.
pub fn clean_stale() -> Vec<String> {
    let live = live_runs();
    let stale: BTreeSet<String> = resources(PREFIX)
        .iter()
        .filter_map(|(_, name)| run_of(name))
        .filter(|r| !live.contains(*r))
        .map(str::to_string)
        .collect();
    let mut failures = Vec::new();
    for run in &stale {
        failures.extend(clean(&format!("{PREFIX}{run}-")));
    }
    for (run, path) in crate::files_with_suffix(Path::new(RUNS_DIR), ".pid") {
        if !live.contains(&run) {
            let _ = std::fs::remove_file(path);
        }
    }
    failures
}

/// A live run's claim on its id: `RUNS_DIR/<run>.pid` holding this
/// process's pid, removed on drop.
pub struct RunLock {
    path: PathBuf,
}

impl RunLock {
    /// Claims `run` for this process.
    ///
    /// # Errors
    /// When the pid file cannot be written, or a live run holds that id.
    pub fn acquire(run: &str) -> anyhow::Result<RunLock> {
        std::fs::create_dir_all(RUNS_DIR).with_context(|| format!("creating {RUNS_DIR}"))?;
        if live_runs().contains(run) {
            bail!("run id {run} is held by a live run; start again");
        }
        let path = PathBuf::from(RUNS_DIR).join(format!("{run}.pid"));
        std::fs::write(&path, std::process::id().to_string())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(RunLock { path })
    }

    /// The pid file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `3: osj-ab-h@if2: <...>` -> `osj-ab-h`.
fn link_name(line: &str) -> Option<&str> {
    let rest = line.split_once(": ")?.1;
    let name = rest.split(':').next()?;
    Some(name.split('@').next().unwrap_or(name))
}

/// Kills every process in each namespace named `prefix*`, deletes the
/// namespaces and the root-namespace links of that prefix. Best effort:
/// returns what it could not remove.
pub fn clean(prefix: &str) -> Vec<String> {
    let mut failures = Vec::new();
    if let Ok(list) = sh(&["ip", "netns", "list"]) {
        for line in list.lines() {
            let Some(ns) = line.split_whitespace().next() else {
                continue;
            };
            if !ns.starts_with(prefix) {
                continue;
            }
            if let Ok(pids) = sh(&["ip", "netns", "pids", ns]) {
                for pid in pids
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                {
                    // SIGCONT first so a paused process can die and be reaped.
                    // SAFETY: kill(2) with a pid read from the kernel; no memory is touched.
                    unsafe {
                        libc::kill(pid, libc::SIGCONT);
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
            if let Err(e) = sh(&["ip", "netns", "del", ns]) {
                failures.push(format!("{ns}: {e}"));
            }
        }
    }
    if let Ok(links) = sh(&["ip", "-o", "link", "show"]) {
        for line in links.lines() {
            if let Some(name) = link_name(line) {
                if name.starts_with(prefix) {
                    // The veth may already be gone with its peer's namespace.
                    let _ = sh(&["ip", "link", "del", name]);
                }
            }
        }
    }
    failures.extend(leftovers(prefix));
    failures
}

/// The namespaces, bridge and addresses of one run. Dropping it removes them.
pub struct Net {
    /// `osj-<run>`.
    pub prefix: String,
    /// Third octet of `10.211.X.0/24`.
    pub octet: u8,
    /// Number of nodes.
    pub nodes: usize,
    /// Switch namespace.
    pub switch_ns: String,
}

impl Net {
    /// Creates the network for `nodes` nodes of run `run` (a short id).
    ///
    /// # Errors
    /// When a command fails; what was created is removed on drop.
    pub fn setup(run: &str, nodes: usize) -> anyhow::Result<Net> {
        let prefix = format!("{PREFIX}{run}");
        if prefix.len() + 2 > 15 {
            bail!("run id {run:?} is too long for interface names");
        }
        // A /24 no other live run uses (their harness veths carry them).
        let in_use = sh(&["ip", "-o", "-4", "addr", "show"]).unwrap_or_default();
        let start = run
            .bytes()
            .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()))
            % 250;
        let Some(octet) = (0..250u32)
            .map(|k| 1 + ((start + k) % 250) as u8)
            .find(|o| !in_use.contains(&format!(" 10.211.{o}.")))
        else {
            bail!("every 10.211.X.0/24 is in use by other runs");
        };
        let net = Net {
            switch_ns: format!("{prefix}-sw"),
            prefix,
            octet,
            nodes,
        };
        let sw = net.switch_ns.clone();
        sh(&["ip", "netns", "add", &sw])?;
        sh(&["ip", "-n", &sw, "link", "set", "lo", "up"])?;
        sh(&["ip", "-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        sh(&["ip", "-n", &sw, "link", "set", "br0", "up"])?;
        for i in 1..=nodes {
            net.plug(&net.node_ns(i), &format!("n{i}"), &net.node_ip(i))?;
        }
        let host = net.host_link();
        sh(&[
            "ip", "link", "add", &host, "type", "veth", "peer", "name", "harness", "netns", &sw,
        ])?;
        sh(&[
            "ip", "-n", &sw, "link", "set", "harness", "master", "br0", "up",
        ])?;
        let addr = format!("{}/24", net.harness_ip());
        sh(&["ip", "addr", "add", &addr, "dev", &host])?;
        sh(&["ip", "link", "set", &host, "up"])?;
        nsh(&sw, &["nft", "add", "table", "bridge", "osj"])?;
        nsh(
            &sw,
            &[
                "nft",
                "add chain bridge osj cut { type filter hook forward priority 0; policy accept; }",
            ],
        )?;
        Ok(net)
    }

    /// Creates namespace `ns` with `eth0` at `ip`, plugged into the bridge
    /// as port `port` (an interface name in the switch namespace, at most 15
    /// characters). Other harnesses (the chart's pod harness) plug their own
    /// namespaces this way; name them `<prefix>-...` so [`clean`] removes them.
    ///
    /// # Errors
    /// When a command fails.
    pub fn plug(&self, ns: &str, port: &str, ip: &str) -> anyhow::Result<()> {
        let sw = &self.switch_ns;
        sh(&["ip", "netns", "add", ns])?;
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        sh(&[
            "ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns",
            sw,
        ])?;
        sh(&[
            "ip", "-n", sw, "link", "set", "dev", port, "master", "br0", "up",
        ])?;
        let addr = format!("{ip}/24");
        sh(&["ip", "-n", ns, "addr", "add", &addr, "dev", "eth0"])?;
        sh(&["ip", "-n", ns, "link", "set", "eth0", "up"])?;
        Ok(())
    }

    /// Adds the *members* namespace `osj-<run>-m` at `10.211.X.200` (port
    /// `m` of the bridge), where the pool workload runs its supervisor and
    /// sandbox-runtime processes. Partitions never cut it (like the
    /// harness's port); packet loss on a node hits it like any peer.
    /// Returns (namespace, address).
    ///
    /// # Errors
    /// When a command fails; the namespace goes with the others on drop.
    pub fn add_members_namespace(&self) -> anyhow::Result<(String, String)> {
        let (ns, ip) = self.members_namespace();
        self.plug(&ns, "m", &ip)?;
        Ok((ns, ip))
    }

    /// (namespace, address) of the members namespace
    /// ([`Net::add_members_namespace`] creates it).
    pub fn members_namespace(&self) -> (String, String) {
        (
            format!("{}-m", self.prefix),
            format!("10.211.{}.200", self.octet),
        )
    }

    /// Namespace of node `i` (1-based).
    pub fn node_ns(&self, i: usize) -> String {
        format!("{}-n{i}", self.prefix)
    }

    /// Address of node `i`.
    pub fn node_ip(&self, i: usize) -> String {
        format!("10.211.{}.{}", self.octet, 10 + i)
    }

    /// Removes namespace `ns` (killing what runs in it) and, with it, its
    /// end of the veth pair (the bridge's end goes too).
    ///
    /// # Errors
    /// When `ip netns del` fails.
    pub fn unplug(&self, ns: &str) -> anyhow::Result<()> {
        if let Ok(pids) = sh(&["ip", "netns", "pids", ns]) {
            for pid in pids.split_whitespace() {
                let _ = sh(&["kill", "-9", pid]);
            }
        }
        sh(&["ip", "netns", "del", ns]).map(|_| ())
    }

    /// Gives the harness's veth up to [`CLIENT_ADDRESSES`] more addresses
    /// of the run's /24 (`10.211.X.100` and up) and returns them: a harness
    /// whose many clients stand for many machines (the scale bench's
    /// supervisors) dials from them in turn, so that the gateways'
    /// per-address limits (pending handshakes, handshake rate) see a crowd
    /// as the crowd it stands for rather than as one address. They go with
    /// the veth when the run ends.
    ///
    /// # Errors
    /// When `ip addr add` fails.
    pub fn add_client_addresses(&self, count: usize) -> anyhow::Result<Vec<std::net::IpAddr>> {
        let host = self.host_link();
        let mut added = Vec::new();
        for i in 0..count.min(CLIENT_ADDRESSES) {
            let ip = std::net::Ipv4Addr::new(10, 211, self.octet, 100 + i as u8);
            sh(&["ip", "addr", "add", &format!("{ip}/24"), "dev", &host])?;
            added.push(std::net::IpAddr::V4(ip));
        }
        Ok(added)
    }

    /// The harness's own address on the bridge.
    pub fn harness_ip(&self) -> String {
        format!("10.211.{}.254", self.octet)
    }

    /// Root-namespace end of the harness veth.
    pub fn host_link(&self) -> String {
        format!("{}-h", self.prefix)
    }

    /// `cut`: drops every packet between nodes of different groups (nodes
    /// are 1-based; a node in no group is cut from nobody).
    ///
    /// # Errors
    /// When nft fails.
    pub fn cut(&self, groups: &[Vec<usize>]) -> anyhow::Result<()> {
        let mut rules = String::new();
        for (gi, a) in groups.iter().enumerate() {
            for (gj, b) in groups.iter().enumerate() {
                if gi == gj {
                    continue;
                }
                for x in a {
                    for y in b {
                        rules.push_str(&format!(
                            "add rule bridge osj cut iifname \"n{x}\" oifname \"n{y}\" drop\n"
                        ));
                    }
                }
            }
        }
        self.nft_script(&rules)
    }

    /// `cut` between explicit pairs of nodes, both directions.
    ///
    /// # Errors
    /// When nft fails.
    pub fn cut_pairs(&self, pairs: &[(usize, usize)]) -> anyhow::Result<()> {
        let mut rules = String::new();
        for (x, y) in pairs {
            for (a, b) in [(x, y), (y, x)] {
                rules.push_str(&format!(
                    "add rule bridge osj cut iifname \"n{a}\" oifname \"n{b}\" drop\n"
                ));
            }
        }
        self.nft_script(&rules)
    }

    fn nft_script(&self, rules: &str) -> anyhow::Result<()> {
        if rules.is_empty() {
            return Ok(());
        }
        let path = std::env::temp_dir().join(format!("{}-rules.nft", self.prefix));
        std::fs::write(&path, rules).context("writing nft rules")?;
        let path_s = path.display().to_string();
        let result = nsh(&self.switch_ns, &["nft", "-f", &path_s]);
        let _ = std::fs::remove_file(&path);
        result.map(|_| ())
    }

    /// `isolate`: cuts node `i` from every other node.
    ///
    /// # Errors
    /// When nft fails.
    pub fn isolate(&self, i: usize) -> anyhow::Result<()> {
        let others: Vec<usize> = (1..=self.nodes).filter(|n| *n != i).collect();
        self.cut(&[vec![i], others])
    }

    /// `drop`: node `i` loses each packet from the other nodes with
    /// probability `p` (the harness's packets are spared).
    ///
    /// # Errors
    /// When iptables fails.
    pub fn drop(&self, i: usize, p: f64) -> anyhow::Result<()> {
        let p = format!("{:.3}", p.clamp(0.0, 1.0));
        let harness = self.harness_ip();
        nsh(
            &self.node_ns(i),
            &[
                "iptables",
                "-A",
                "INPUT",
                "!",
                "-s",
                &harness,
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &p,
                "-j",
                "DROP",
            ],
        )
        .map(|_| ())
    }

    /// `recover`: removes every cut and drop.
    ///
    /// # Errors
    /// When a command fails.
    pub fn recover(&self) -> anyhow::Result<()> {
        nsh(
            &self.switch_ns,
            &["nft", "flush", "chain", "bridge", "osj", "cut"],
        )?;
        for i in 1..=self.nodes {
            nsh(&self.node_ns(i), &["iptables", "-F", "INPUT"])?;
        }
        Ok(())
    }

    /// The active nft rules (for the node logs).
    pub fn rules(&self) -> String {
        nsh(&self.switch_ns, &["nft", "list", "table", "bridge", "osj"]).unwrap_or_default()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let failures = clean(&format!("{}-", self.prefix));
        if !failures.is_empty() {
            eprintln!("openshell-jepsen: could not remove {failures:?}; run: {CLEAN_COMMAND}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_names_are_parsed() {
        assert_eq!(
            link_name("12: osj-t-h@if6: <BROADCAST,MULTICAST,UP> mtu 1500"),
            Some("osj-t-h")
        );
        assert_eq!(run_of("osj-ab12cd-n1"), Some("ab12cd"));
        assert_eq!(run_of("osj-ab12cd-h"), Some("ab12cd"));
        assert_eq!(run_of("eth0"), None);
        assert_eq!(link_name("1: lo: <LOOPBACK>"), Some("lo"));
    }
}
