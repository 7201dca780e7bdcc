//! The process driver's network namespaces: one per runtime, named after it,
//! joined to the host by a veth pair (`osb<8 hex>h` on the host,
//! `osb<8 hex>r` inside) over a /30 of `10.213.0.0/16` (host side `.1`,
//! namespace side `.2`). The /30s are allocated under an exclusive `flock`
//! on `<dir>/.lock`: the lowest index that no entry's `subnet` file records
//! and that no host interface already carries (another driver directory on
//! the same host, e.g. a concurrent test).

use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{unavailable, ENTRY_SUBNET};
use crate::DriverError;

/// The pool of /30s: `10.213.0.0/16`.
const POOL_BASE: u32 = u32::from_be_bytes([10, 213, 0, 0]);

/// Number of /30s in the pool.
const POOL_SIZE: u32 = 1 << 14;

/// A runtime's network: its namespace, veth pair and addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Netns {
    /// The namespace name (the runtime's name).
    pub name: String,
    /// The host end of the veth pair.
    pub host_link: String,
    /// The namespace end of the veth pair.
    pub runtime_link: String,
    /// Index of the /30 in the pool.
    pub index: u32,
}

impl Netns {
    /// The namespace of runtime `name` on /30 number `index`.
    pub fn new(name: &str, index: u32) -> Self {
        let (host_link, runtime_link) = veth_names(name);
        Netns {
            name: name.to_string(),
            host_link,
            runtime_link,
            index,
        }
    }

    /// The host side's address (`.1`).
    pub fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(POOL_BASE + 4 * self.index + 1)
    }

    /// The namespace side's address (`.2`), where the runtime listens.
    pub fn runtime_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(POOL_BASE + 4 * self.index + 2)
    }

    /// Creates the namespace (`ip netns add`): it fails when one by this
    /// name exists, which is then not ours to remove.
    ///
    /// # Errors
    /// The `ip` command's stderr.
    pub async fn add(&self) -> Result<(), DriverError> {
        ip(&["netns", "add", &self.name]).await.map(|_| ())
    }

    /// In the namespace [`Netns::add`] created: brings `lo` up, creates the
    /// veth pair and gives both ends their addresses.
    ///
    /// # Errors
    /// The failing `ip` command, with its stderr.
    pub async fn plumb(&self) -> Result<(), DriverError> {
        let ns = self.name.as_str();
        let (h, r) = (self.host_link.as_str(), self.runtime_link.as_str());
        let host_addr = format!("{}/30", self.host_ip());
        let runtime_addr = format!("{}/30", self.runtime_ip());
        ip(&["-n", ns, "link", "set", "lo", "up"]).await?;
        ip(&[
            "link", "add", h, "type", "veth", "peer", "name", r, "netns", ns,
        ])
        .await?;
        ip(&["addr", "add", &host_addr, "dev", h]).await?;
        ip(&["link", "set", h, "up"]).await?;
        ip(&["-n", ns, "addr", "add", &runtime_addr, "dev", r]).await?;
        ip(&["-n", ns, "link", "set", r, "up"]).await?;
        Ok(())
    }
}

/// The namespace of runtime `name` launched by the driver of directory
/// `dir`: `<name>-<8 hex of the directory>`, so that two drivers on one host
/// (two dev systems, tests running side by side) never claim one namespace
/// for runtimes of equal names.
pub fn namespace_name(dir: &Path, name: &str) -> String {
    let digest = Sha256::digest(dir.as_os_str().as_encoded_bytes());
    format!("{name}-{}", hex::encode(&digest[..4]))
}

/// The veth pair's names for namespace `name`: `osb<8 hex>h`, `osb<8 hex>r`
/// (12 characters, within the kernel's 15), the hex from the SHA-256 of the
/// name.
pub fn veth_names(name: &str) -> (String, String) {
    let digest = Sha256::digest(name.as_bytes());
    let hex = hex::encode(&digest[..4]);
    (format!("osb{hex}h"), format!("osb{hex}r"))
}

/// Removes namespace `ns` (its veth end goes with it, and so the pair) and
/// the host end `host_link` if it is still there. Ok when already gone.
///
/// # Errors
/// A failing `ip` command, with its stderr.
pub async fn remove(ns: &str, host_link: &str) -> Result<(), DriverError> {
    let ns_exists = || {
        Path::new("/run/netns").join(ns).exists() || Path::new("/var/run/netns").join(ns).exists()
    };
    if ns_exists() {
        if let Err(e) = ip(&["netns", "del", ns]).await {
            if ns_exists() {
                return Err(e);
            }
        }
    }
    // Deleting the namespace makes the kernel tear it down in the
    // background, and the veth pair with it: the host end may vanish
    // between the check and `ip link del` ("RTNETLINK answers: No such
    // device"). What counts is that it is gone afterwards, whatever `ip`
    // said about the race.
    let link_exists = || Path::new("/sys/class/net").join(host_link).exists();
    if link_exists() {
        if let Err(e) = ip(&["link", "del", host_link]).await {
            if link_exists() {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Whether this process may create network namespaces: euid 0 and `ip
/// netns list` works. `Err` says why not.
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(format!("network namespaces need root (euid is {euid})"));
    }
    let output = std::process::Command::new("ip")
        .args(["netns", "list"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("ip netns list: cannot run: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "ip netns list: {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    ))
}

/// Runs `ip args...`; its stdout, or an error naming the command and its
/// stderr.
///
/// # Errors
/// [`DriverError::Unavailable`].
pub async fn ip(args: &[&str]) -> Result<String, DriverError> {
    let output = tokio::process::Command::new("ip")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| unavailable(format!("ip {}: cannot run: {e}", args.join(" "))))?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    Err(unavailable(format!(
        "ip {}: {}: {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

/// Where drivers of every directory on this host serialise allocations, so
/// that two directories never hand out the same /30 at once.
const HOST_LOCK: &str = "/run/openshell-process-driver.lock";

/// Exclusive flocks, released on drop.
#[derive(Debug)]
pub struct Locks {
    /// Held only for their descriptors: closing one releases its flock.
    _files: Vec<std::fs::File>,
}

/// Takes an exclusive flock on `path` (created if missing).
fn flock(path: &Path) -> Result<std::fs::File, DriverError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
    // SAFETY: flock on a descriptor we own; released when `file` closes.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(unavailable(format!("flock {}: {e}", path.display())));
    }
    Ok(file)
}

/// Allocates the lowest free /30 for the entry `entry` (a directory of
/// `dir`) and records it in `<entry>/subnet`, under the flock of
/// `<dir>/.lock` and the host's [`HOST_LOCK`]. Blocking: call from
/// `spawn_blocking`. Hold the returned locks until the host side's address
/// is in place (the host scan of the next allocation sees it then).
///
/// # Errors
/// The lock, the listing or the write failed, or the pool is exhausted.
pub fn allocate(dir: &Path, entry: &Path) -> Result<(u32, Locks), DriverError> {
    let mut locks = vec![flock(&dir.join(".lock"))?];
    match flock(Path::new(HOST_LOCK)) {
        Ok(host) => locks.push(host),
        Err(e) => {
            tracing::warn!(error = %e, "no host-wide allocation lock; relying on the host scan")
        }
    }
    let mut used = recorded(dir)?;
    used.extend(on_host_interfaces()?);
    let index = (0..POOL_SIZE)
        .find(|i| !used.contains(i))
        .ok_or_else(|| unavailable("every /30 of 10.213.0.0/16 is in use".to_string()))?;
    let path = entry.join(ENTRY_SUBNET);
    let base = Ipv4Addr::from(POOL_BASE + 4 * index);
    std::fs::File::create(&path)
        .and_then(|mut f| writeln!(f, "{base}/30"))
        .map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
    Ok((index, Locks { _files: locks }))
}

/// The /30 an entry records (`<entry>/subnet`), if any.
pub fn recorded_index(entry: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(entry.join(ENTRY_SUBNET)).ok()?;
    let ip: Ipv4Addr = text.trim().strip_suffix("/30")?.parse().ok()?;
    index_of(ip)
}

/// The pool index of the /30 holding `ip`, if it is in the pool.
fn index_of(ip: Ipv4Addr) -> Option<u32> {
    let offset = u32::from(ip).checked_sub(POOL_BASE)?;
    (offset < 4 * POOL_SIZE).then_some(offset / 4)
}

/// The /30s recorded by the entries of `dir`.
fn recorded(dir: &Path) -> Result<Vec<u32>, DriverError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| unavailable(format!("{}: {e}", dir.display())))?;
    Ok(entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p: &PathBuf| p.is_dir())
        .filter_map(|p| recorded_index(&p))
        .collect())
}

/// The /30s of the pool that host interfaces carry.
fn on_host_interfaces() -> Result<Vec<u32>, DriverError> {
    let output = std::process::Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| unavailable(format!("ip -o -4 addr show: cannot run: {e}")))?;
    if !output.status.success() {
        return Err(unavailable(format!(
            "ip -o -4 addr show: {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text
        .split_whitespace()
        .filter_map(|word| word.split('/').next()?.parse::<Ipv4Addr>().ok())
        .filter_map(index_of)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names() {
        let n = Netns::new("sbx-a-g1-00000000", 0);
        assert_eq!(n.host_ip(), Ipv4Addr::new(10, 213, 0, 1));
        assert_eq!(n.runtime_ip(), Ipv4Addr::new(10, 213, 0, 2));
        let n = Netns::new("sbx-a-g1-00000000", 64 + 1);
        assert_eq!(n.runtime_ip(), Ipv4Addr::new(10, 213, 1, 6));
        assert_eq!(index_of(Ipv4Addr::new(10, 213, 1, 5)), Some(65));
        assert_eq!(index_of(Ipv4Addr::new(10, 214, 0, 1)), None);
        assert_eq!(index_of(Ipv4Addr::new(10, 212, 255, 255)), None);
        let (h, r) = veth_names("sbx-a-g1-00000000");
        assert!(h.len() <= 15 && r.len() <= 15, "{h} {r}");
        assert!(h.starts_with("osb") && h.ends_with('h') && r.ends_with('r'));
        assert_eq!(h[..11], r[..11]);
        assert_ne!(veth_names("a").0, veth_names("b").0);
        let (one, two) = (Path::new("/a/runtimes"), Path::new("/b/runtimes"));
        let name = "sbx-a-g1-00000000";
        assert_ne!(namespace_name(one, name), namespace_name(two, name));
        assert_eq!(namespace_name(one, name), namespace_name(one, name));
        assert!(namespace_name(one, name).starts_with("sbx-a-g1-00000000-"));
        assert_ne!(
            veth_names(&namespace_name(one, name)),
            veth_names(&namespace_name(two, name))
        );
    }
}
