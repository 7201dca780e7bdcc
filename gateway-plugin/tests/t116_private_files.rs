//! A gateway's data is readable by its own user only (issue 32 item 5),
//! through a real gateway process started under umask 022 (where files are
//! 0644 and directories 0755 by default).
//!
//! - given: one gateway on a fresh data directory, a write, a snapshot
//!   built (`TriggerSnapshot`)
//! - then: the data directory and every directory under it are 0700, every
//!   file (the raft database `raft/db`, sled's `conf`, the snapshot, the
//!   watermark) 0600
//! - given: the gateway stopped, and its data left as an older version
//!   left it (directory 0755, files 0644)
//! - when: it starts again
//! - then: it logs a warning naming the data directory, its mode and
//!   `chmod 700`; the directory keeps its mode (the operator's to change);
//!   every directory and file the node owns inside it is 0700/0600 again

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use proto::cluster::TriggerSnapshotRequest;
use testkit::gateway::*;
use testkit::TestResult;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (path, mode) of everything under `dir`.
fn modes_under(dir: &Path) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)
            .unwrap_or_else(|e| panic!("{e}"))
            .flatten()
        {
            let p = entry.path();
            out.push((p.display().to_string(), mode(&p)));
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Every directory under `dir` 0700, every file 0600.
fn assert_private(dir: &Path, when: &str) {
    let wrong: Vec<_> = modes_under(dir)
        .into_iter()
        .filter(|(p, m)| {
            let want = if Path::new(p).is_dir() { 0o700 } else { 0o600 };
            *m != want
        })
        .map(|(p, m)| format!("{p} {m:o}"))
        .collect();
    assert!(wrong.is_empty(), "{when}: not private: {wrong:#?}");
}

/// Sets `path` to `mode`, and (a directory) everything under it to 0755
/// or 0644, as a gateway under umask 022 left them before this fix.
fn widen(path: &Path) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{e}"));
    for (p, _) in modes_under(path) {
        let m = if Path::new(&p).is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m))
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_and_its_files_are_private() -> TestResult {
    // SAFETY: umask has no preconditions; the gateways this test starts
    // inherit it.
    unsafe {
        libc::umask(0o022);
    }
    let mut cluster = Cluster::start(1, &[]);
    cluster.wait_leader("bootstrap").await;
    for i in 0..20 {
        put(cluster.get(1), &format!("k{i}"), "v").await?;
    }
    let snapshot = cluster
        .get(1)
        .admin()
        .await?
        .trigger_snapshot(TriggerSnapshotRequest {})
        .await?
        .into_inner();
    assert!(snapshot.snapshot_index > 0);
    let dir = cluster.get(1).data_dir.clone();

    eprintln!("--- step: a fresh data directory");
    assert!(dir.join("raft").join("db").is_file());
    assert!(dir.join("snapshots").join("current.snap").is_file());
    assert_eq!(format!("{:o}", mode(&dir)), "700", "the data directory");
    assert_private(&dir, "fresh");

    eprintln!("--- step: restart on data an older version left open");
    cluster.node(1).signal("-TERM");
    let exited = cluster.node(1).wait_exit(Duration::from_secs(15)).await;
    assert!(exited.is_some(), "the gateway did not stop");
    widen(&dir);
    assert_eq!(format!("{:o}", mode(&dir.join("raft").join("db"))), "644");
    cluster.node(1).start();
    cluster.wait_leader("restarted").await;
    assert_eq!(
        get(cluster.get(1), "k19", false).await?.as_deref(),
        Some("v")
    );
    let log = cluster.get(1).log();
    let warning = log
        .lines()
        .find(|l| l.contains("the data directory is open to other local users"))
        .unwrap_or_else(|| panic!("no warning about the data directory's mode"));
    assert!(
        warning.contains("WARN")
            && warning.contains("0755")
            && warning.contains(&format!("chmod 700 {}", dir.display())),
        "{warning}"
    );
    assert_eq!(
        format!("{:o}", mode(&dir)),
        "755",
        "the data directory itself is left alone"
    );
    assert_private(&dir, "restarted");
    Ok(())
}
