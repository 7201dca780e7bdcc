//! `backup save` streams a state over 64 MiB and `restore` reads it back
//! (issue 16 §2), through real processes: gateway, CLI, restored gateway.
//!
//! - given: one gateway (ticks every 10 s, so its state holds still between
//!   reads) with 2200 objects of 32,000 bytes: a state of about 70 MB,
//!   more than the old unary Backup's 64 MiB reply cap
//! - when: `openshell-pool backup save` writes the file (BackupStream, in
//!   chunks of at most 1 MiB)
//! - then: the file's header names the source's applied index and the crc32
//!   of the source's state digest at that index; `openshell-gateway
//!   restore` reads the file into a fresh data directory, and the gateway
//!   started on it serves a state whose digest equals the source's (at the
//!   backup's index) and every object with its payload

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::cli::*;
use common::*;
use proto::cluster::StateDigestRequest;

/// Objects written; at 32,000 bytes each the state passes 64 MiB.
const OBJECTS: usize = 2200;
/// Payload of each object, in bytes (the object store allows 32 KiB).
const PAYLOAD: usize = 32_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_over_64_mib_is_saved_in_chunks_and_restored_whole() -> TestResult {
    let scratch = tempfile::tempdir()?;
    let config = scratch.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[openshell.gateway.supervisor_pool]\ntick_interval_ms = 10000\nheartbeat_ttl_ms = 60000\n",
    )?;
    let config = config.display().to_string();
    let cluster = Cluster::start(1, &["--config", &config]);
    cluster.wait_leader("bootstrap").await;
    let source = cluster.get(1).addr.clone();

    eprintln!("--- step: write {OBJECTS} objects of {PAYLOAD} bytes");
    let ids: Vec<String> = (0..OBJECTS).map(|i| format!("big-{i:05}")).collect();
    for batch in ids.chunks(32) {
        let mut calls = Vec::new();
        for id in batch {
            let (addr, id) = (source.clone(), id.clone());
            let value = format!("{id}:{}", "x".repeat(PAYLOAD - id.len() - 1));
            calls.push(tokio::spawn(async move {
                put_at(&addr, &id, &value).await.map_err(|e| e.to_string())
            }));
        }
        for call in calls {
            call.await??;
        }
    }

    eprintln!("--- step: backup save (between two reads of the source's digest)");
    let file = scratch.path().join("big.osbackup");
    let file_arg = file.display().to_string();
    let mut attempts = 0;
    let (header, source_digest) = loop {
        attempts += 1;
        let before = digest(cluster.get(1)).await?;
        let (code, out, err) = pool(&source, &["-o", "json", "backup", "save", &file_arg]);
        assert_eq!(code, 0, "backup save: {out} {err}");
        let after = digest(cluster.get(1)).await?;
        let (header, state) = proto::backup::read(&file)?;
        assert!(
            header.bytes > 64 * 1024 * 1024,
            "state of {} bytes",
            header.bytes
        );
        assert_eq!(state.len() as u64, header.bytes);
        drop(state);
        // A tick between the reads moves the index: take it again.
        if before == after && before.0 == header.index {
            break (header, (before.1, before.2));
        }
        assert!(
            attempts < 5,
            "the source never held still: {before:?} {after:?}"
        );
    };
    assert_eq!(
        source_digest,
        (header.crc32, header.bytes),
        "the file is the source's state"
    );

    eprintln!("--- step: restore into a fresh data directory and start a gateway on it");
    let root = tempfile::tempdir()?;
    let mut restored = Gateway::new(1, root.path(), vec!["--config".into(), config.clone()]);
    let mut cmd = Command::new(gateway_bin());
    cmd.args([
        "restore",
        "--from",
        &file_arg,
        "--node-id",
        "1",
        "--cluster-id",
        "test",
    ])
    .args(["--advertise", &restored.addr, "--data-dir"])
    .arg(&restored.data_dir);
    let (code, err) = run_to_end(cmd);
    assert_eq!(code, 0, "restore: {err}");
    restored.start();

    eprintln!("--- step: the restored objects equal the source's, byte for byte");
    // The whole-state digest cannot be compared once the restored gateway
    // runs: as leader it appends its own entries (leader change, ticks) at
    // once. The object store is what the backup carries that nothing else
    // writes: every object, its revision and its payload must be the same.
    let want = all_objects(cluster.get(1)).await?;
    assert_eq!(want.len(), OBJECTS, "the source lists every object");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match all_objects(&restored).await {
            Ok(got) if got == want => break,
            other => assert!(
                Instant::now() < deadline,
                "the restored gateway never listed the source's objects: {:?}\n{}",
                other.map(|g| g.len()),
                restored.log()
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sample = [0, OBJECTS / 2, OBJECTS - 1];
    for i in sample {
        let got = eventually("a restored object", || async {
            Ok(get(&restored, &ids[i], true).await?.ok_or("absent")?)
        })
        .await;
        assert!(
            got.starts_with(&format!("{}:", ids[i])) && got.len() == PAYLOAD,
            "{}",
            ids[i]
        );
    }
    Ok(())
}

/// Every object of the test type on `node` (local state), in id order:
/// (id, resource version, payload), page by page.
async fn all_objects(node: &Gateway) -> TestResult<Vec<(String, u64, Vec<u8>)>> {
    let mut client = node.objects().await?;
    let mut all = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list(proto::objects::ListRequest {
                r#type: "test".into(),
                page_size: 64,
                page_token: token.clone(),
                stale: true,
                ..Default::default()
            })
            .await?
            .into_inner();
        all.extend(
            page.objects
                .into_iter()
                .map(|o| (o.id, o.resource_version, o.payload)),
        );
        if page.next_page_token.is_empty() {
            return Ok(all);
        }
        token = page.next_page_token;
    }
}

/// A gateway's (applied index, crc32, bytes) of its state.
async fn digest(node: &Gateway) -> TestResult<(u64, u32, u64)> {
    let d = node
        .admin()
        .await?
        .state_digest(StateDigestRequest::default())
        .await?
        .into_inner();
    Ok((d.applied_index, d.crc32, d.bytes))
}
