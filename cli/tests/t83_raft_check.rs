//! `openshell-pool raft check` compares every gateway's state at one
//! applied index (issue 31 §2), through real gateways and the real CLI.
//!
//! - given: 3 gateways and a writer that keeps the log moving
//! - when: `raft check` runs against all three
//! - then: exit 0; the three digests are at one applied index (taken inside
//!   each gateway's apply loop, not "now") and equal
//! - when: it runs against two of them, or one of the three is killed
//! - then: exit 3 naming the member that was not compared; `raft status`
//!   shows a row per gateway (version, data size, leader, errors), the
//!   dead one's with why it did not answer
//! - given: two separate one-gateway clusters holding different objects
//! - when: `raft check` is pointed at both, as if they were replicas
//! - then: exit 7, "REPLICAS DIFFER" naming the index and both digests
//! - and: asked for an index 5 entries ahead, each gateway answers with the
//!   state right after that index (equal on all three); an index absurdly
//!   far ahead is refused (INVALID_ARGUMENT), not waited for

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::cli::*;
use common::*;
use proto::cluster::StateDigestRequest;
use serde_json::Value;

fn check(endpoints: &str) -> (i32, Value, String) {
    let (code, out, err) = pool(endpoints, &["-o", "json", "raft", "check"]);
    let doc = serde_json::from_str(&out).unwrap_or_else(|e| panic!("json ({e}): {out} / {err}"));
    (code, doc, err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_agree_at_one_index_while_the_log_moves() -> TestResult {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    let addrs: Vec<String> = (1..=3).map(|id| cluster.get(id).addr.clone()).collect();
    let all = addrs.join(",");

    eprintln!("--- step: a writer keeps the log moving");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, addr) = (stop.clone(), cluster.get(leader).addr.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let _ = put_at(&addr, &format!("obj-{}", n % 50), &n.to_string()).await;
            }
            n
        })
    };
    eventually("the writer wrote", || async {
        let s = cluster.get(leader).status().await?;
        if s.applied_index > 20 {
            Ok(())
        } else {
            Err(format!("applied index {}", s.applied_index).into())
        }
    })
    .await;

    eprintln!("--- step: raft check against all three: one index, equal digests");
    let (code, doc, err) = check(&all);
    assert_eq!(code, 0, "raft check: {doc} {err}");
    assert_eq!(doc["consistent"], true, "{doc}");
    assert_eq!(doc["complete"], true, "{doc}");
    let gateways = doc["gateways"].as_array().cloned().unwrap_or_default();
    assert_eq!(gateways.len(), 3, "{doc}");
    let index = gateways[0]["applied_index"].as_u64();
    let crc = gateways[0]["crc32"].as_u64();
    assert!(index.is_some_and(|i| i > 20), "{doc}");
    for g in &gateways {
        assert_eq!(g["applied_index"].as_u64(), index, "one index: {doc}");
        assert_eq!(g["crc32"].as_u64(), crc, "one digest: {doc}");
    }
    let mut nodes: Vec<u64> = gateways
        .iter()
        .filter_map(|g| g["node_id"].as_u64())
        .collect();
    nodes.sort_unstable();
    assert_eq!(nodes, vec![1, 2, 3], "{doc}");
    let (code, table, err) = pool(&all, &["raft", "check"]);
    assert_eq!(code, 0, "{table} {err}");
    assert_eq!(
        table.lines().filter(|l| l.ends_with(" ok")).count(),
        3,
        "{table}"
    );

    eprintln!("--- step: each gateway digests exactly the index asked for, inside apply");
    let ahead = cluster.get(leader).status().await?.last_log_index + 5;
    let mut at = Vec::new();
    for id in 1..=3 {
        let mut admin = cluster.get(id).admin().await?;
        at.push(tokio::spawn(async move {
            admin
                .state_digest(StateDigestRequest {
                    at_index: ahead,
                    wait_ms: 20_000,
                })
                .await
                .map(tonic::Response::into_inner)
        }));
    }
    let mut digests = Vec::new();
    for d in at {
        digests.push(d.await??);
    }
    for d in &digests {
        assert_eq!(d.applied_index, ahead, "{digests:?}");
        assert_eq!(d.crc32, digests[0].crc32, "{digests:?}");
    }

    eprintln!("--- step: a far-off index is refused, not waited for");
    let refused = cluster
        .get(1)
        .admin()
        .await?
        .state_digest(StateDigestRequest {
            at_index: u64::MAX / 2,
            wait_ms: 30_000,
        })
        .await
        .expect_err("an index far ahead");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");

    eprintln!("--- step: raft status shows each gateway's own row");
    let status = json(&all, &["raft", "status"]);
    let rows = status["gateways"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 3, "{status}");
    assert_eq!(
        rows.iter().filter(|r| r["is_leader"] == true).count(),
        1,
        "{status}"
    );
    for r in &rows {
        assert_eq!(r["version"], env!("CARGO_PKG_VERSION"), "{status}");
        assert!(
            r["data_size_bytes"].as_u64().is_some_and(|b| b > 0),
            "{status}"
        );
        assert_eq!(r["is_learner"], false, "{status}");
        assert_eq!(r["errors"], serde_json::json!([]), "{status}");
        assert!(
            r["applied_index"].as_u64().is_some_and(|i| i > 20),
            "{status}"
        );
    }

    eprintln!("--- step: two of three endpoints: the third member is named");
    let two = addrs[..2].join(",");
    let (code, doc, err) = check(&two);
    assert_eq!(code, 3, "{doc} {err}");
    assert_eq!(doc["consistent"], true, "{doc}");
    assert_eq!(doc["complete"], false, "{doc}");
    assert!(err.contains("member 3"), "names member 3: {err}");

    stop.store(true, Ordering::Relaxed);
    let written = writer.await?;
    eprintln!("writer wrote {written} objects");

    eprintln!("--- step: a follower killed: its endpoint is named");
    let follower = (1..=3).find(|id| *id != leader).unwrap_or(1);
    cluster.node(follower).kill9();
    let (code, doc, err) = check(&all);
    assert_eq!(code, 3, "{doc} {err}");
    assert!(
        err.contains(&cluster.get(follower).addr),
        "names the dead gateway {}: {err}",
        cluster.get(follower).addr
    );
    let (code, table, err) = pool(&all, &["raft", "status"]);
    assert_eq!(code, 0, "{err}");
    let dead_row = table
        .lines()
        .find(|l| l.starts_with(&cluster.get(follower).addr))
        .unwrap_or_else(|| panic!("a row for the dead gateway: {table}"));
    assert!(dead_row.contains("no gateway reachable"), "{dead_row}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_states_at_one_index_exit_7() -> TestResult {
    let a = Cluster::start(1, &[]);
    let b = Cluster::start(1, &[]);
    a.wait_leader("bootstrap a").await;
    b.wait_leader("bootstrap b").await;
    put(a.get(1), "only-in-a", "1").await?;
    put(b.get(1), "only-in-b", "1").await?;
    let both = format!("{},{}", a.get(1).addr, b.get(1).addr);
    let (code, doc, err) = check(&both);
    assert_eq!(code, 7, "replicas differ is exit 7: {doc} {err}");
    assert_eq!(doc["consistent"], false, "{doc}");
    assert!(err.contains("REPLICAS DIFFER at applied index"), "{err}");
    let at = doc["mismatched_at"][0].as_u64();
    let gateways = doc["gateways"].as_array().cloned().unwrap_or_default();
    assert!(
        gateways.iter().all(|g| g["applied_index"].as_u64() == at),
        "compared at one index: {doc}"
    );
    Ok(())
}
