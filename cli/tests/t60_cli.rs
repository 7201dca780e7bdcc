//! The operator CLI, driven as a user would: spawned `openshell-pool`
//! processes, output parsed from `-o json`.
//!
//! - `openshell-pool dev` brings up 3 gateways (TLS), 2 supervisors and demo
//!   sandboxes; every command runs against it, with the CA and admin token
//!   `dev` generated (`--ca-file`, `--token-file`): raft status / add-learner /
//!   promote / transfer-leader / remove / snapshot, pool status / drain
//!   --wait / cancel / rebalance --wait, sandbox create / get / list / exec /
//!   delete, backup save, completions; Ctrl-C stops every process
//! - membership through the CLI: a fourth (secure) gateway, its certificate
//!   issued by the dev CA, is added at its peer port as a learner,
//!   promoted, given leadership, and the old leader is removed; writes keep
//!   working throughout
//! - backup and restore: objects and pool state are saved, every data
//!   directory is wiped, a new cluster is restored from the file, and every
//!   object and sandbox compares equal

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cli::*;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_drives_the_dev_cluster_membership_and_backup_restore() -> TestResult {
    build_supervisor_bins();
    let root = tempfile::tempdir()?;
    let dir = root.path().join("dev");
    std::fs::create_dir_all(&dir)?;
    let base = free_base();
    let e = format!(
        "127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
        base,
        base + 1,
        base + 2
    );
    let mut dev = Dev::start(&dir, base);

    eprintln!("--- step: dev comes up and prints endpoints and commands to try");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dev.output().contains("Ctrl-C stops") {
        assert!(
            Instant::now() < deadline,
            "dev did not come up: {}",
            dev.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(dev.output().contains("raft status") && dev.output().contains("sandbox exec"));
    let sec = dev.security();
    let cs = dev.client();

    eprintln!("--- step: raft status");
    let raft = json_as(&sec, &e, &["raft", "status"]);
    for key in [
        "leader",
        "term",
        "commit_index",
        "applied_index",
        "voters",
        "learners",
    ] {
        assert!(!raft[key].is_null(), "raft status lacks {key}: {raft}");
    }
    assert_eq!(raft["voters"].as_array().map(Vec::len), Some(3));
    assert!(raft["nodes"]
        .as_array()
        .is_some_and(|n| n.iter().all(|n| n["addr"].is_string() && n["lag"].is_u64())));

    eprintln!("--- step: pool status and sandboxes");
    let status = json_as(&sec, &e, &["pool", "status"]);
    assert_eq!(
        status["members"].as_array().map(Vec::len),
        Some(2),
        "{status}"
    );
    for m in status["members"].as_array().into_iter().flatten() {
        for key in ["id", "state", "capacity", "used"] {
            assert!(!m[key].is_null(), "member lacks {key}");
        }
    }
    assert_eq!(status["sandboxes"].as_array().map(Vec::len), Some(3));
    let created = json_as(&sec, &e, &["sandbox", "create", "--", "sleep", "600"]);
    let id = created["id"].as_str().ok_or("no id")?.to_string();
    let got = json_until_as(
        &sec,
        &e,
        &["sandbox", "get", &id],
        "new sandbox running",
        |v| v["phase"] == "assigned" && v["pid"].is_u64(),
    );
    for key in [
        "id",
        "owner",
        "term",
        "credential_epoch",
        "phase",
        "pid",
        "started_at",
    ] {
        assert!(!got[key].is_null(), "sandbox get lacks {key}: {got}");
    }
    assert_eq!(
        json_as(&sec, &e, &["sandbox", "list"])
            .as_array()
            .map(Vec::len),
        Some(4)
    );
    let (code, out, err) = pool_as(&sec, &e, &["sandbox", "exec", "demo-1", "--", "demo-read"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.trim().parse::<u64>().is_ok(),
        "demo-read printed {out:?}"
    );
    let (code, _, _) = pool_as(
        &sec,
        &e,
        &["sandbox", "exec", "demo-1", "--", "sh", "-c", "exit 7"],
    );
    assert_eq!(code, 7, "exec passes the command's exit status through");

    eprintln!("--- step: drain --wait, cancel returns the member to service, rebalance --wait");
    let drained = json_as(
        &sec,
        &e,
        &["pool", "drain", "s1", "--max-parallel", "2", "--wait"],
    );
    assert_eq!(drained["phase"], "succeeded", "{drained}");
    let after = json_as(&sec, &e, &["pool", "status"]);
    assert!(after["sandboxes"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|s| s["owner"] != "s1" || s["phase"] == "deleted"));
    let op = drained["id"].as_str().ok_or("no op id")?;
    let cancelled = json_as(&sec, &e, &["pool", "cancel", op]);
    assert_eq!(cancelled["phase"], "cancelled");
    json_until_as(&sec, &e, &["pool", "status"], "s1 back in service", |v| {
        v["members"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["id"] == "s1" && m["state"] == "active")
    });
    let rebalanced = json_as(&sec, &e, &["pool", "rebalance", "--wait"]);
    assert_eq!(rebalanced["phase"], "succeeded", "{rebalanced}");
    let deleted = json_as(&sec, &e, &["sandbox", "delete", &id]);
    assert_eq!(deleted["phase"], "deleted");

    eprintln!("--- step: raft snapshot, completions");
    assert!(
        json_as(&sec, &e, &["raft", "snapshot"])["snapshot_index"]
            .as_u64()
            .unwrap_or(0)
            > 0
    );
    let (code, out, _) = pool_as(&sec, &e, &["completions", "bash"]);
    assert!(code == 0 && out.contains("openshell-pool"));

    eprintln!("--- step: membership through the CLI: add a learner, promote, transfer, remove the old leader");
    let material = dev_material(&dir);
    let mut g4 = Gateway::new_secure(4, root.path(), &material, Vec::new());
    g4.cluster_id = "openshell-dev".into();
    // The process driver's view must be the dev cluster's: a leader whose
    // driver lists another directory sees none of the demo runtimes and
    // fails every demo sandbox as `RuntimeLost: ... is gone` (CI saw it
    // land between the pool read and the backup).
    g4.runtimes_dir = dir.join("runtimes");
    let args = g4.args();
    let log = std::fs::File::create(root.path().join("g4.log"))?;
    assert_eq!(g4.spec().config.insecure, None, "{args:?}");
    assert!(!args.iter().any(|a| a == "--insecure"), "{args:?}");
    let mut g4_child = Command::new(gateway_bin())
        .args(&args)
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()?;
    let old_leader = raft["leader"].as_u64().ok_or("no leader")?;
    let added = json_as(&sec, &e, &["raft", "add-learner", "4", g4.member_addr()]);
    assert!(
        added["learners"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["id"] == 4),
        "{added}"
    );
    put_object(
        &format!("127.0.0.1:{base}"),
        Some(&cs),
        "during-membership-1",
        "a",
    )
    .await?;
    let promoted = json_as(&sec, &e, &["raft", "promote", "4"]);
    assert!(
        promoted["voters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["id"] == 4),
        "{promoted}"
    );
    let moved = json_as(&sec, &e, &["raft", "transfer-leader", "4"]);
    assert_eq!(moved["leader"], 4);
    put_object(&g4.addr, Some(&cs), "during-membership-2", "b").await?;
    let e4 = format!("{e},{}", g4.addr);
    let removed = json_as(&sec, &e4, &["raft", "remove", &old_leader.to_string()]);
    assert!(
        !removed["voters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["id"] == old_leader),
        "{removed}"
    );
    put_object(&g4.addr, Some(&cs), "during-membership-3", "c").await?;
    let objects = objects_at(&g4.addr, Some(&cs)).await?;
    for key in [
        "during-membership-1",
        "during-membership-2",
        "during-membership-3",
    ] {
        assert!(objects.iter().any(|(k, _, _)| k == key), "{key} lost");
    }
    let e_live = format!("{},{}", g4.addr, e);

    eprintln!("--- step: backup save, wipe everything, restore, compare");
    for i in 0..20 {
        put_object(
            &g4.addr,
            Some(&cs),
            &format!("obj-{i}"),
            &format!("value-{i}"),
        )
        .await?;
    }
    let before_objects = objects_at(&g4.addr, Some(&cs)).await?;
    let before_pool = json_as(&sec, &e_live, &["pool", "status"]);
    let file = root.path().join("pool.backup");
    let saved = json_as(
        &sec,
        &e_live,
        &["backup", "save", file.to_str().ok_or("path")?],
    );
    assert!(saved["index"].as_u64().unwrap_or(0) > 0, "{saved}");
    dev.interrupt();
    let _ = g4_child.kill();
    let _ = g4_child.wait();
    assert_eq!(
        processes_under(&dir),
        0,
        "dev left processes behind after Ctrl-C"
    );

    eprintln!("--- step: running dev again resumes its data");
    // Node 4 (the leader) is gone and the old leader was removed: the two
    // other original gateways are a majority of the voters {them, 4}.
    let mut again = Dev::start(&dir, base);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !again.output().contains("Resumed the data") {
        assert!(
            Instant::now() < deadline,
            "dev did not resume: {}",
            again.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Ask the gateways that are still members (the removed one knows no leader).
    let members: String = (0..3u16)
        .filter(|i| u64::from(*i) + 1 != old_leader)
        .map(|i| format!("127.0.0.1:{}", base + i))
        .collect::<Vec<_>>()
        .join(",");
    let resumed = json_until_as(
        &sec,
        &members,
        &["raft", "status"],
        "a leader after resume",
        |v| v["leader"].is_u64(),
    );
    assert!(
        resumed["commit_index"].as_u64().unwrap_or(0)
            >= saved["index"].as_u64().unwrap_or(u64::MAX),
        "{resumed}"
    );
    // The membership holds peer ports; the leader's client port is its
    // node id's (gateway N serves clients on base + N - 1).
    let leader = resumed["leader"].as_u64().ok_or("no leader")?;
    assert!(
        resumed["leader_addr"]
            .as_str()
            .is_some_and(|a| a.ends_with(&format!(":{}", base + 10 + leader as u16 - 1))),
        "the membership names the peer ports: {resumed}"
    );
    let leader_addr = format!("127.0.0.1:{}", base + leader as u16 - 1);
    let resumed_objects = objects_at(&leader_addr, Some(&cs)).await?;
    assert!(
        before_objects.iter().all(|o| resumed_objects.contains(o)),
        "objects lost across a dev restart"
    );
    again.interrupt();
    assert_eq!(
        processes_under(&dir),
        0,
        "dev left processes behind after the second Ctrl-C"
    );
    std::fs::remove_dir_all(&dir)?;
    std::fs::remove_dir_all(&g4.data_dir)?;
    let restored_dir = root.path().join("restored");
    let addr = format!("127.0.0.1:{}", free_port());
    let out = Command::new(gateway_bin())
        .args(["restore", "--from"])
        .arg(&file)
        .arg("--data-dir")
        .arg(&restored_dir)
        .args(["--node-id", "1", "--advertise", &addr])
        .output()?;
    assert!(
        out.status.success(),
        "restore failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::File::create(root.path().join("restored.log"))?;
    let mut restored = Command::new(gateway_bin())
        .arg("--insecure")
        .args([
            "--node-id",
            "1",
            "--listen",
            &addr,
            "--cluster-id",
            "openshell-dev",
            "--data-dir",
        ])
        .arg(&restored_dir)
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()?;
    let after_pool = json_until(
        &addr,
        &["pool", "status"],
        "restored cluster serves",
        |_| true,
    );
    let restored_log =
        std::fs::read_to_string(root.path().join("restored.log")).unwrap_or_default();
    assert_eq!(
        sandbox_key(&after_pool),
        sandbox_key(&before_pool),
        "sandboxes differ after restore; restored: {after_pool}\nbackup: {saved}\nrestored gateway's log:\n{restored_log}"
    );
    let after_objects = objects_at(&addr, None).await?;
    assert_eq!(
        after_objects, before_objects,
        "objects differ after restore"
    );
    put_object(&addr, None, "after-restore", "x").await?;
    let _ = restored.kill();
    let _ = restored.wait();
    Ok(())
}
