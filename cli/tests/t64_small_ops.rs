//! Small operator mistakes get a clear refusal or warning, and nothing is
//! written (issue 12 item 9).
//!
//! - `restore` with node id 0 or `--advertise notanaddr`: refused, the data
//!   directory is not created.
//! - `recover --force-new-cluster` on a missing directory: refused, nothing
//!   created.
//! - duplicate ids (or one address under two ids) in `--initial-voters` /
//!   `--initial-members`: the gateway exits 1 at start-up naming them.
//! - a gateway restarted with another `--listen` than its address in the
//!   membership: it warns, naming both addresses and the fix.
//! - `local-status --data-dir` on a stopped node: its node id, cluster id,
//!   log, committed index, membership and vote, and the directory unchanged.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::cli::*;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_and_recover_refuse_bad_targets_and_write_nothing() -> TestResult {
    let cluster = Cluster::start(1, &[]);
    cluster.wait_leader("bootstrap").await;
    put(cluster.get(1), "k", "v").await?;
    let scratch = tempfile::tempdir()?;
    let backup = scratch.path().join("b.osbackup");
    let backup_arg = backup.display().to_string();
    let (code, _, err) = pool(&cluster.get(1).addr, &["backup", "save", &backup_arg]);
    assert_eq!(code, 0, "backup save: {err}");

    let target = scratch.path().join("restored");
    let cases: [(&str, &[&str], &str); 3] = [
        (
            "node id 0",
            &["--node-id", "0", "--advertise", "127.0.0.1:7001"],
            "node id 0 is reserved",
        ),
        (
            "advertise notanaddr",
            &["--advertise", "notanaddr"],
            "\"notanaddr\" is not host:port",
        ),
        (
            "advertise without a host",
            &["--advertise", ":7001"],
            "is not host:port",
        ),
    ];
    for (what, args, expect) in cases {
        eprintln!("--- step: restore with {what}");
        let mut cmd = Command::new(gateway_bin());
        cmd.args(["restore", "--from", &backup_arg])
            .args(args)
            .arg("--data-dir")
            .arg(&target);
        let (code, err) = run_to_end(cmd);
        assert_eq!(code, 1, "{what}: {err}");
        assert!(err.contains(expect), "{what}: {err}");
        assert!(err.contains("nothing was written"), "{what}: {err}");
        assert!(!target.exists(), "{what}: {} was created", target.display());
    }

    eprintln!("--- step: recover --force-new-cluster on a missing directory");
    let missing = scratch.path().join("no-such-dir");
    let mut cmd = Command::new(gateway_bin());
    cmd.args(["recover", "--force-new-cluster", "--node-id", "1"])
        .args(["--advertise", "127.0.0.1:7001", "--data-dir"])
        .arg(&missing);
    let (code, err) = run_to_end(cmd);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is missing or holds no raft/db"), "{err}");
    assert!(err.contains("nothing was created"), "{err}");
    assert!(!missing.exists(), "recover created {}", missing.display());
    let mut cmd = Command::new(gateway_bin());
    cmd.args(["recover", "--force-new-cluster", "--node-id", "0"])
        .args(["--advertise", "127.0.0.1:7001", "--data-dir"])
        .arg(&cluster.get(1).data_dir);
    let (code, err) = run_to_end(cmd);
    assert!(code == 1 && err.contains("node id 0 is reserved"), "{err}");
    Ok(())
}

#[test]
fn duplicate_initial_voters_are_refused_at_start_up() {
    let scratch = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let a = format!("127.0.0.1:{}", free_port());
    let b = format!("127.0.0.1:{}", free_port());
    let cases = [
        (
            "--initial-voters",
            format!("1={a},2={b},2=127.0.0.1:1"),
            "node id 2 is listed twice".to_string(),
        ),
        (
            "--initial-members",
            format!("1={a},2={b},3={b}"),
            format!("address {b} is listed for node ids 2 and 3"),
        ),
    ];
    for (flag, list, expect) in cases {
        eprintln!("--- step: {flag} {list}");
        let dir = scratch.path().join("node-1");
        let mut cmd = Command::new(gateway_bin());
        cmd.args(["--node-id", "1", "--listen", &a, "--cluster-id", "test"])
            .args([flag, &list])
            .arg("--data-dir")
            .arg(&dir);
        let (code, err) = run_to_end(cmd);
        assert_eq!(code, 1, "{flag} {list}: {err}");
        assert!(err.contains(&expect), "{flag} {list}: {err}");
        assert!(err.contains("initial_voters"), "{err}");
        assert!(!dir.exists(), "{flag}: the data directory was created");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_listening_off_its_membership_address_says_so() -> TestResult {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_leader("bootstrap").await;
    let old = cluster.get(3).addr.clone();
    eprintln!("--- step: node 3 restarts on its data directory with another port");
    let node = cluster.node(3);
    node.kill9();
    node.addr = format!("127.0.0.1:{}", free_port());
    let new = node.addr.clone();
    node.start();
    let deadline = Instant::now() + Duration::from_secs(30);
    let wanted = format!("advertises {new}, but the cluster membership has node 3 at {old}");
    loop {
        let log = cluster.get(3).log();
        if log.contains(&wanted) {
            assert!(log.contains("raft remove 3"), "no fix named: {log}");
            assert!(
                log.contains(&format!("--listen/--advertise {old}")),
                "{log}"
            );
            break;
        }
        if Instant::now() > deadline {
            cluster.dump_logs();
            panic!("node 3 never warned {wanted:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("--- step: restarted on its membership address, it rejoins");
    let node = cluster.node(3);
    node.kill9();
    node.addr = old;
    node.start();
    cluster.wait_leader("node 3 back on its address").await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_status_reads_a_stopped_node_without_changing_it() -> TestResult {
    let mut cluster = Cluster::start(1, &["--snapshot-after-logs", "50"]);
    cluster.wait_leader("bootstrap").await;
    for i in 0..80 {
        put(cluster.get(1), &format!("k{i}"), "v").await?;
    }
    let live = cluster.get(1).status().await?;
    let addr = cluster.get(1).addr.clone();
    let dir = cluster.get(1).data_dir.clone();
    cluster.node(1).kill9();
    let before = contents(&dir);

    eprintln!("--- step: local-status -o json on the stopped node");
    let dir_arg = dir.display().to_string();
    let (code, out, err) = pool(
        "unused:1",
        &["-o", "json", "local-status", "--data-dir", &dir_arg],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(v["node_id"], 1, "{v}");
    assert_eq!(v["cluster_id"], "test", "{v}");
    let last = v["last_log_index"].as_u64().unwrap_or(0);
    assert!(last >= live.applied_index, "{v} vs {live:?}");
    let committed = v["committed_index"].as_u64().unwrap_or(0);
    assert!(committed > 0 && committed <= last, "{v}");
    assert!(v["snapshot_index"].as_u64().unwrap_or(0) > 0, "{v}");
    assert_eq!(v["voters"][0]["id"], 1, "{v}");
    assert_eq!(v["voters"][0]["addr"], addr.as_str(), "{v}");
    assert_eq!(v["vote"]["voted_for"], 1, "{v}");
    assert!(v["vote"]["term"].as_u64().unwrap_or(0) >= 1, "{v}");

    eprintln!("--- step: the table form, and nothing changed");
    let (code, out, err) = pool("unused:1", &["local-status", "--data-dir", &dir_arg]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("node id") && out.contains(&format!("1={addr}")),
        "{out}"
    );
    assert!(
        contents(&dir) == before,
        "local-status changed the directory"
    );

    eprintln!("--- step: a directory that is not a data directory");
    let empty = tempfile::tempdir()?;
    let empty_arg = empty.path().display().to_string();
    let (code, _, err) = pool("unused:1", &["local-status", "--data-dir", &empty_arg]);
    assert!(code == 1 && err.contains("holds no raft/db"), "{err}");

    eprintln!("--- step: the node starts again on the directory");
    cluster.node(1).start();
    cluster.wait_leader("restart").await;
    assert_eq!(dump(cluster.get(1), false).await?.len(), 80);
    Ok(())
}
