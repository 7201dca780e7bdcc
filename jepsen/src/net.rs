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
//! (killing the processes inside) and link, and is what the Drop guard, the
//! Ctrl-C handler and `openshell-jepsen clean` call.

use std::process::Command;

use anyhow::{bail, Context};

/// Prefix of everything the harness creates.
pub const PREFIX: &str = "osj-";

/// The exact command that removes leftovers by hand.
pub const CLEAN_COMMAND: &str = "openshell-jepsen clean   # or: for ns in $(ip netns list | awk '/^osj-/{print $1}'); do ip netns pids $ns | xargs -r kill -9; ip netns del $ns; done; ip -o link show | awk -F': ' '$2 ~ /^osj-/{split($2,a,\"@\"); print a[1]}' | xargs -r -n1 ip link del";

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
/// `prefix`.
pub fn leftovers(prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(list) = sh(&["ip", "netns", "list"]) {
        for line in list.lines() {
            if let Some(name) = line.split_whitespace().next() {
                if name.starts_with(prefix) {
                    out.push(format!("netns {name}"));
                }
            }
        }
    }
    if let Ok(links) = sh(&["ip", "-o", "link", "show"]) {
        for line in links.lines() {
            if let Some(name) = link_name(line) {
                if name.starts_with(prefix) {
                    out.push(format!("link {name}"));
                }
            }
        }
    }
    out
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
        let octet = 1
            + (run
                .bytes()
                .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()))
                % 250) as u8;
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
            let ns = net.node_ns(i);
            let port = format!("n{i}");
            sh(&["ip", "netns", "add", &ns])?;
            sh(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
            sh(&[
                "ip", "-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port,
                "netns", &sw,
            ])?;
            sh(&["ip", "-n", &sw, "link", "set", &port, "master", "br0", "up"])?;
            let addr = format!("{}/24", net.node_ip(i));
            sh(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            sh(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
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

    /// Namespace of node `i` (1-based).
    pub fn node_ns(&self, i: usize) -> String {
        format!("{}-n{i}", self.prefix)
    }

    /// Address of node `i`.
    pub fn node_ip(&self, i: usize) -> String {
        format!("10.211.{}.{}", self.octet, 10 + i)
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
        assert_eq!(link_name("1: lo: <LOOPBACK>"), Some("lo"));
    }
}
