//! Bad input never resets data or panics.
//!
//! - given: a gateway's data directory holding acknowledged writes and a snapshot
//! - when: the directory is corrupted, truncated, belongs to another cluster or
//!   node, is not a data directory, or its snapshot is damaged
//! - then: the gateway refuses to start with an error naming the path and the
//!   problem, and leaves every file byte-for-byte as it was
//! - and: malformed RPCs to a running gateway get error statuses, never a panic

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use proto::objects::{GetRequest, ListRequest, PutRequest};
use proto::raft::raft_transport_client::RaftTransportClient;
use proto::raft::{ForwardRequest, RaftPayload, ReadIndexRequest};
use testkit::bins::gateway_bin;
use testkit::gateway::*;
use testkit::ports::free_port;
use testkit::TestResult;

/// Every file under `dir` with its bytes.
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)
            .unwrap_or_else(|e| panic!("{e}"))
            .flatten()
        {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{e}"));
    for entry in std::fs::read_dir(from)
        .unwrap_or_else(|e| panic!("{e}"))
        .flatten()
    {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// Runs the gateway on `dir`; returns (exited non-zero within 20 s, stderr).
fn start_refused(dir: &Path, args: &[&str]) -> (bool, String) {
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let mut cmd = Command::new(gateway_bin());
    // `args` may override the node id and cluster id.
    let node_id = args
        .iter()
        .position(|a| *a == "--node-id")
        .map(|i| args[i + 1])
        .unwrap_or("1");
    let cluster = args
        .iter()
        .position(|a| *a == "--cluster-id")
        .map(|i| args[i + 1])
        .unwrap_or("test");
    cmd.args([
        "--insecure",
        "--node-id",
        node_id,
        "--listen",
        &listen,
        "--cluster-id",
        cluster,
        "--data-dir",
    ])
    .arg(dir)
    .env("RUST_BACKTRACE", "0")
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{e}"));
    let started = std::time::Instant::now();
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
async fn damaged_or_foreign_data_directories_are_refused_untouched() -> TestResult {
    eprintln!("--- step: a one-node cluster writes 300 objects and snapshots");
    let mut cluster = Cluster::start(1, &["--snapshot-after-logs", "100"]);
    cluster.wait_leader("bootstrap").await;
    for i in 0..300 {
        put(cluster.get(1), &format!("o{i}"), &"x".repeat(200)).await?;
    }
    let status = cluster.get(1).status().await?;
    assert!(status.snapshot_index > 0, "no snapshot: {status:?}");
    let good = cluster.get(1).data_dir.clone();
    cluster.node(1).kill9();
    let scratch = tempfile::tempdir()?;
    if let Ok(keep) = std::env::var("KEEP_GOOD_DIR") {
        copy_dir(&good, Path::new(&keep));
    }

    let case = |name: &str, damage: &dyn Fn(&Path), args: &[&str], expect: &[&str]| {
        let dir = scratch.path().join(name);
        copy_dir(&good, &dir);
        damage(&dir);
        let before = contents(&dir);
        let (refused, stderr) = start_refused(&dir, args);
        assert!(refused, "{name}: the gateway did not refuse: {stderr}");
        for word in expect {
            assert!(
                stderr.contains(word),
                "{name}: stderr lacks {word:?}: {stderr}"
            );
        }
        assert!(
            stderr.contains(&dir.display().to_string()),
            "{name}: error does not name the path: {stderr}"
        );
        assert!(
            contents(&dir) == before,
            "{name}: files changed while refusing"
        );
        assert!(!stderr.contains("panicked"), "{name}: panicked: {stderr}");
    };

    eprintln!("--- step: corrupt, truncated, foreign and non-data directories are refused");
    case(
        "corrupt",
        &|d| {
            let p = d.join("raft/db");
            let mut bytes = std::fs::read(&p).unwrap_or_default();
            let mid = bytes.len() / 3;
            let end = (mid + 8192).min(bytes.len());
            for b in &mut bytes[mid..end] {
                *b ^= 0x5a;
            }
            std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("{e}"));
        },
        &[],
        &["refusing to start"],
    );
    case(
        "truncated",
        &|d| {
            let p = d.join("raft/db");
            let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .unwrap_or_else(|e| panic!("{e}"));
            f.set_len(len / 4).unwrap_or_else(|e| panic!("{e}"));
        },
        &[],
        &["refusing to start"],
    );
    case(
        "other-cluster",
        &|_| {},
        &["--cluster-id", "another"],
        &["belongs to cluster \"test\""],
    );
    case(
        "other-node",
        &|_| {},
        &["--node-id", "2"],
        &["belongs to node 1"],
    );
    case(
        "snapshot-damaged",
        &|d| {
            let p = d.join("snapshots/current.snap");
            let mut bytes = std::fs::read(&p).unwrap_or_default();
            let n = bytes.len();
            bytes[n / 2] ^= 0xff;
            std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("{e}"));
        },
        &[],
        &["checksum"],
    );
    case(
        "watermark-missing",
        &|d| std::fs::remove_file(d.join("raft.hwm")).unwrap_or_else(|e| panic!("{e}")),
        &[],
        &["raft.hwm"],
    );
    let not_data = scratch.path().join("not-data");
    std::fs::create_dir_all(&not_data)?;
    std::fs::write(not_data.join("notes.txt"), "hello")?;
    let (refused, stderr) = start_refused(&not_data, &[]);
    assert!(
        refused && stderr.contains("not an openshell-gateway data directory"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(not_data.join("notes.txt"))?,
        "hello"
    );

    eprintln!("--- step: the undamaged directory still starts and holds every write");
    cluster.node(1).start();
    cluster.wait_leader("restart on the good directory").await;
    assert_eq!(dump(cluster.get(1), false).await?.len(), 300);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_rpcs_get_error_statuses() -> TestResult {
    let cluster = Cluster::start(1, &[]);
    cluster.wait_leader("bootstrap").await;
    let node = cluster.get(1);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.addr))?
        .connect()
        .await?;
    // An --insecure gateway serves the raft transport on its one port and
    // checks only the cluster id (t92_peer_tls covers the peer port's
    // mutual TLS).
    let mut raft = RaftTransportClient::new(channel);

    eprintln!("--- step: raft transport bodies that do not decode");
    let garbage = RaftPayload {
        encoding: 1,
        data: vec![0xff; 37],
        cluster_id: "test".into(),
        target_node_id: 0,
    };
    for result in [
        raft.append_entries(garbage.clone()).await,
        raft.vote(garbage.clone()).await,
        raft.install_snapshot(garbage.clone()).await,
    ] {
        assert_eq!(
            result.map(|_| ()).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
    let wrong_encoding = RaftPayload {
        encoding: 99,
        ..garbage.clone()
    };
    assert_eq!(
        raft.vote(wrong_encoding).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    let foreign = RaftPayload {
        cluster_id: "other".into(),
        ..garbage
    };
    assert_eq!(
        raft.vote(foreign).await.unwrap_err().code(),
        tonic::Code::PermissionDenied
    );
    let forward = ForwardRequest {
        command: vec![0xff, 0x01, 0x02],
        cluster_id: "test".into(),
        target_node_id: 0,
    };
    assert_eq!(
        raft.forward(forward).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    let read = ReadIndexRequest {
        cluster_id: "other".into(),
        target_node_id: 0,
    };
    assert_eq!(
        raft.read_index(read).await.unwrap_err().code(),
        tonic::Code::PermissionDenied
    );

    eprintln!("--- step: object store requests that are invalid");
    let mut objects = node.objects().await?;
    let no_object = PutRequest {
        object: None,
        precondition: None,
        request_id: String::new(),
    };
    assert_eq!(
        objects.put(no_object).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    let mut huge = object("big", "");
    huge.payload = vec![0; 1024 * 1024];
    let err = objects
        .put(PutRequest {
            object: Some(huge),
            precondition: None,
            request_id: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    let err = objects
        .get(GetRequest {
            r#type: String::new(),
            id: "x".into(),
            stale: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let bad_page = ListRequest {
        r#type: "test".into(),
        page_token: "nope".into(),
        ..Default::default()
    };
    assert_eq!(
        objects.list(bad_page).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );

    eprintln!("--- step: the node still serves and never panicked");
    put(node, "still-alive", "yes").await?;
    assert_eq!(
        get(node, "still-alive", false).await?.as_deref(),
        Some("yes")
    );
    assert!(!node.log().contains("panicked"), "{}", node.log());
    assert!(
        node.log().contains("malformed raft RPC"),
        "malformed RPCs are not logged"
    );
    Ok(())
}
