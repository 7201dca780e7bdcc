//! A gateway whose snapshot file was crafted (a data length near
//! `u64::MAX`, checksum recomputed so it matches) refuses to start with an
//! error naming the file, as for any damaged snapshot, instead of
//! panicking on the length arithmetic (the `snapshot_file` fuzz target's
//! finding, replayed through the real binary).
//!
//! - given: a one-node cluster that wrote objects and took a snapshot, then
//!   was killed;
//! - when: `snapshots/current.snap` gets a data length of `u64::MAX - 7`
//!   and a matching crc32, and the gateway starts on it;
//! - then: it exits non-zero within 20 s, says the file is truncated, names
//!   it, does not panic, and leaves the file as it was.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::bins::gateway_bin;
use testkit::gateway::{put, Cluster};
use testkit::ports::free_port;
use testkit::TestResult;

/// Rewrites the data length of a snapshot file and recomputes its crc32.
fn craft(path: &Path, data_len: u64) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let body = &bytes[..bytes.len() - 4];
    let meta_len = u32::from_le_bytes([body[8], body[9], body[10], body[11]]) as usize;
    let at = 12 + meta_len;
    let mut out = body.to_vec();
    out[at..at + 8].copy_from_slice(&data_len.to_le_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    std::fs::write(path, out).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Starts the gateway on `dir`: (exited non-zero within 20 s, stderr).
fn start_refused(dir: &Path) -> (bool, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(gateway_bin())
        .args([
            "--insecure",
            "--node-id",
            "1",
            "--listen",
            &listen,
            "--cluster-id",
            "test",
        ])
        .arg("--data-dir")
        .arg(dir)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn gateway: {e}"));
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut s) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut s, &mut err);
            }
            return (!status.success(), err);
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            return (false, "still running after 20 s: it did not refuse".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crafted_snapshot_length_is_refused_at_start_without_panic() -> TestResult {
    eprintln!("--- step: a one-node cluster writes 150 objects and snapshots");
    let mut cluster = Cluster::start(1, &["--snapshot-after-logs", "100"]);
    cluster.wait_leader("bootstrap").await;
    for i in 0..150 {
        put(cluster.get(1), &format!("o{i}"), "value").await?;
    }
    let status = cluster.get(1).status().await?;
    assert!(status.snapshot_index > 0, "no snapshot: {status:?}");
    let dir = cluster.get(1).data_dir.clone();
    cluster.node(1).kill9();

    eprintln!("--- step: the snapshot's data length becomes u64::MAX - 7, crc32 recomputed");
    let snap = dir.join("snapshots/current.snap");
    craft(&snap, u64::MAX - 7);
    let before = std::fs::read(&snap)?;

    eprintln!("--- step: the gateway starts on it and refuses");
    let (refused, stderr) = start_refused(&dir);
    assert!(refused, "the gateway did not refuse: {stderr}");
    assert!(
        !stderr.contains("panicked"),
        "the gateway panicked: {stderr}"
    );
    assert!(
        stderr.contains("truncated"),
        "the error does not say truncated: {stderr}"
    );
    assert!(
        stderr.contains(&snap.display().to_string()),
        "the error does not name the file: {stderr}"
    );
    assert!(
        std::fs::read(&snap)? == before,
        "the snapshot file changed while refusing"
    );
    Ok(())
}
