//! The soak's samples: every interval, per gateway, its resident memory
//! (`VmRSS` of `/proc/<pid>/status`), the size of its current snapshot file
//! (`<data>/snapshots/current.snap`), the size of its applied state
//! (`ClusterAdmin.StateDigest`'s `bytes`: the deterministic snapshot
//! encoding at its applied index, what the next snapshot file will hold),
//! the disk its data directory takes (`du`: allocated blocks of every file
//! under it) and its applied index; plus the workload's counters.
//!
//! Written as `samples.json` (the whole [`Soak`] record, read back by
//! `openshell-bench soak-plot`) and `samples.csv` (one row per sample time,
//! `<node>_<metric>` columns).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::driver::DriverCounters;
use super::members::MemberCounters;
use jepsen::cluster::{Cluster, Node};

/// One gateway at one sample time (0 where it could not be read).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSample {
    /// `n<i>`.
    pub node: String,
    /// Resident set size, bytes.
    pub rss_bytes: u64,
    /// `current.snap`, bytes (0: no snapshot yet).
    pub snapshot_bytes: u64,
    /// The applied state's snapshot encoding, bytes.
    pub state_bytes: u64,
    /// Disk the data directory takes, bytes (allocated blocks).
    pub disk_bytes: u64,
    /// The node's log file (stdout and stderr: audit records, outside the
    /// data directory), bytes.
    pub log_bytes: u64,
    /// Applied log index.
    pub applied_index: u64,
    /// Index of its latest snapshot.
    pub snapshot_index: u64,
}

/// The workload's counters at one sample time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Sandboxes created.
    pub created: u64,
    /// Sandboxes deleted.
    pub deleted: u64,
    /// Sandboxes live (created, not deleted).
    pub live: u64,
    /// Creates refused or given up.
    pub create_failed: u64,
    /// Deletes given up.
    pub delete_failed: u64,
    /// Members attached now.
    pub members: u64,
    /// Member generations joined so far.
    pub joined: u64,
    /// Member departures so far (drain, leave, crash).
    pub departed: u64,
}

/// One sample time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the workload started.
    pub t_s: f64,
    /// The workload.
    pub counts: Counts,
    /// Every gateway.
    pub nodes: Vec<NodeSample>,
}

/// A soak's record: settings, marks and samples (`samples.json`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Soak {
    /// The settings, as `openshell-bench soak` was given them.
    pub settings: serde_json::Value,
    /// Seconds after which the first retention period is over (the first
    /// delete plus the retention), if any delete happened.
    pub retention_end_s: Option<f64>,
    /// Seconds when the driver finished (every sandbox created and
    /// deleted), if it did.
    pub driver_done_s: Option<f64>,
    /// The samples, in time order.
    pub samples: Vec<Sample>,
}

/// The counters now.
pub fn counts(driver: &DriverCounters, live: usize, members: &MemberCounters) -> Counts {
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    Counts {
        created: get(&driver.created),
        deleted: get(&driver.deleted),
        live: live as u64,
        create_failed: get(&driver.create_failed),
        delete_failed: get(&driver.delete_failed),
        members: get(&members.attached),
        joined: get(&members.joined),
        departed: get(&members.drained) + get(&members.left) + get(&members.crashed),
    }
}

/// `VmRSS` of `pid`, bytes (0 when unreadable).
pub fn rss_bytes(pid: i32) -> u64 {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Allocated bytes of every file under `dir` (as `du -s` counts them;
/// symlinks are not followed). 0 when it does not exist.
pub fn du_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0u64;
    for entry in entries.flatten() {
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        total += meta.blocks() * 512;
        if meta.is_dir() {
            total += du_bytes(&entry.path());
        }
    }
    total
}

/// The size of `<data>/snapshots/current.snap` (0: none).
pub fn snapshot_file_bytes(data_dir: &Path) -> u64 {
    std::fs::metadata(data_dir.join("snapshots").join("current.snap")).map_or(0, |m| m.len())
}

/// Samples one gateway.
async fn sample_node(node: &Node) -> NodeSample {
    let rss = node.pid().map_or(0, rss_bytes);
    let dir = node.data_dir.clone();
    let log = node.log_path.clone();
    let files = tokio::task::spawn_blocking(move || {
        (
            du_bytes(&dir),
            snapshot_file_bytes(&dir),
            std::fs::metadata(&log).map_or(0, |m| m.len()),
        )
    })
    .await
    .unwrap_or_default();
    let (disk_bytes, snapshot_bytes, log_bytes) = files;
    let within = Duration::from_secs(8);
    let mut admin = node.admin();
    let state = tokio::time::timeout(
        within,
        admin.state_digest(proto::cluster::StateDigestRequest::default()),
    )
    .await;
    let state_bytes = match state {
        Ok(Ok(r)) => r.into_inner().bytes,
        _ => 0,
    };
    let status = tokio::time::timeout(within, node.status()).await;
    let (applied_index, snapshot_index) = match status {
        Ok(Ok(s)) => (s.applied_index, s.snapshot_index),
        _ => (0, 0),
    };
    NodeSample {
        node: node.name.clone(),
        rss_bytes: rss,
        snapshot_bytes,
        state_bytes,
        disk_bytes,
        log_bytes,
        applied_index,
        snapshot_index,
    }
}

/// Samples every gateway (at once) with the counters `counts`.
pub async fn sample(cluster: &Cluster, started: Instant, counts: Counts) -> Sample {
    let t_s = started.elapsed().as_secs_f64();
    let nodes = futures::future::join_all(cluster.nodes.iter().map(sample_node)).await;
    Sample { t_s, counts, nodes }
}

/// The CSV columns of one node (after its `n<i>_` prefix).
const NODE_COLUMNS: [&str; 7] = [
    "rss_bytes",
    "snapshot_bytes",
    "state_bytes",
    "disk_bytes",
    "log_bytes",
    "applied_index",
    "snapshot_index",
];

/// `samples` as CSV: `t_s`, the counters, then `<node>_<metric>` per node
/// (nodes as in the first sample).
pub fn to_csv(samples: &[Sample]) -> String {
    let names: Vec<String> = samples
        .first()
        .map(|s| s.nodes.iter().map(|n| n.node.clone()).collect())
        .unwrap_or_default();
    let mut header = vec![
        "t_s",
        "created",
        "deleted",
        "live",
        "create_failed",
        "delete_failed",
        "members",
        "joined",
        "departed",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    for n in &names {
        header.extend(NODE_COLUMNS.iter().map(|c| format!("{n}_{c}")));
    }
    let mut out = header.join(",");
    out.push('\n');
    for s in samples {
        let c = &s.counts;
        let mut row = vec![
            format!("{:.1}", s.t_s),
            c.created.to_string(),
            c.deleted.to_string(),
            c.live.to_string(),
            c.create_failed.to_string(),
            c.delete_failed.to_string(),
            c.members.to_string(),
            c.joined.to_string(),
            c.departed.to_string(),
        ];
        for name in &names {
            let n = s.nodes.iter().find(|n| &n.node == name);
            let n = n.cloned().unwrap_or_default();
            row.extend(
                [
                    n.rss_bytes,
                    n.snapshot_bytes,
                    n.state_bytes,
                    n.disk_bytes,
                    n.log_bytes,
                    n.applied_index,
                    n.snapshot_index,
                ]
                .iter()
                .map(u64::to_string),
            );
        }
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

/// Writes `samples.json` and `samples.csv` into `dir`.
///
/// # Errors
/// When a file cannot be written.
pub fn write(dir: &Path, soak: &Soak) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(soak).context("encoding the samples")?;
    let path = dir.join("samples.json");
    std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()))?;
    let path = dir.join("samples.csv");
    std::fs::write(&path, to_csv(&soak.samples))
        .with_context(|| format!("writing {}", path.display()))
}

/// Reads `samples.json` of a soak directory.
///
/// # Errors
/// When it cannot be read or is not a soak record.
pub fn read(dir: &Path) -> anyhow::Result<Soak> {
    let path = dir.join("samples.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("decoding {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_of_this_process_is_read() {
        assert!(rss_bytes(std::process::id() as i32) > 1024 * 1024);
        assert_eq!(rss_bytes(-1), 0);
    }

    #[test]
    fn du_counts_allocated_blocks_below_a_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("snapshots")).expect("mkdir");
        std::fs::write(
            dir.path().join("snapshots/current.snap"),
            vec![7u8; 100_000],
        )
        .expect("write");
        assert!(du_bytes(dir.path()) >= 100_000);
        assert_eq!(snapshot_file_bytes(dir.path()), 100_000);
        assert_eq!(du_bytes(&dir.path().join("absent")), 0);
    }

    #[test]
    fn csv_has_one_row_per_sample_and_node_columns() {
        let s = Sample {
            t_s: 10.0,
            counts: Counts {
                created: 5,
                ..Counts::default()
            },
            nodes: vec![NodeSample {
                node: "n1".into(),
                rss_bytes: 42,
                ..NodeSample::default()
            }],
        };
        let csv = to_csv(&[s.clone(), s]);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].contains("n1_rss_bytes"), "{}", lines[0]);
        assert!(lines[1].starts_with("10.0,5,"), "{}", lines[1]);
        assert_eq!(
            lines[0].split(',').count(),
            lines[1].split(',').count(),
            "{csv}"
        );
    }
}
