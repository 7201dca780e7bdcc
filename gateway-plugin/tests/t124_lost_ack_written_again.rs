//! A supervisor's acknowledgement whose write found no leader is written
//! again by its gateway: the sandbox does not stay `admitting`.
//!
//! Found by the scale bench (100,000 sandboxes, 2,000 members): an election
//! during the bulk creation left 48 sandboxes `admitting` for good. Their
//! owners had acknowledged once; the follower's forward of each ack was
//! abandoned when leadership moved ("supervisor command not applied"), and
//! nothing made the supervisor send it again (it resends an ack only when a
//! snapshot shows it still owed, and in a quiet pool none is pushed).
//!
//! - given: 3 gateways (20 s heartbeat TTL, so nothing expires here), a
//!   member `m-a` attached to a follower F on a stream this test drives,
//!   and sandbox `s-a` placed on it (F pushed the snapshot that shows it
//!   unacknowledged)
//! - when: the other two gateways are stopped (SIGSTOP), `m-a` sends its one
//!   `TermAck`, F logs that the ack was not applied, and the two continue
//! - then: `s-a` turns `assigned` and acknowledged by `m-a` in its first
//!   term, though `m-a` never sent the ack again

use std::time::Duration;

use proto::pool_admin::CreateSandboxRequest;
use proto::pool_types::SandboxPhase;
use proto::supervisor_host::gateway_message;
use testkit::gateway::*;
use testkit::member::{attach, hello, spawn_pinger, term_ack};
use testkit::supervisor::{http_args, listed_sandbox, pool_admin};
use testkit::TestResult;
use tokio::sync::watch;

/// `s-a` as `node` lists it: (owner, term, phase, acknowledged).
async fn sandbox(node: &Gateway) -> TestResult<(String, u64, SandboxPhase, bool)> {
    let s = listed_sandbox(node, "s-a").await?;
    Ok((
        s.owner,
        s.term,
        SandboxPhase::try_from(s.phase)?,
        s.acknowledged,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_that_found_no_leader_is_written_again() -> TestResult {
    let cluster = Cluster::start_each(
        3,
        &["--tick-interval-ms", "250", "--heartbeat-ttl-ms", "20000"],
        http_args,
    );
    let leader = cluster.wait_leader("a leader").await;
    let follower = (1..=3).find(|id| *id != leader).ok_or("no follower")?;
    let others: Vec<u64> = (1..=3).filter(|id| *id != follower).collect();

    eprintln!("--- step: m-a attaches to follower {follower}; s-a is placed on it");
    let attached = attach(
        &cluster.get(follower).addr,
        Duration::from_secs(2),
        hello("m-a", 7, 0, 4, "127.0.0.1:19999".into()),
        64,
    )
    .await?;
    let (tx, mut inbound) = (attached.tx, attached.inbound);
    let (_never_paused, paused) = watch::channel(false);
    let _pinger = spawn_pinger(tx.clone(), attached.status_interval, paused);
    pool_admin(cluster.get(leader))
        .await?
        .create_sandbox(CreateSandboxRequest {
            sandbox_id: "s-a".into(),
            launch_id: "launch-s-a".into(),
            material_ref: "t124".into(),
            request_id: "t124-launch-s-a".into(),
        })
        .await?;
    let owed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let Some(message) = inbound.message().await? else {
                return Err::<_, Box<dyn std::error::Error + Send + Sync>>(
                    "the stream ended".into(),
                );
            };
            if let Some(gateway_message::Message::Snapshot(s)) = message.message {
                if let Some(a) = s.assignments.into_iter().find(|a| a.sandbox_id == "s-a") {
                    return Ok(a);
                }
            }
        }
    })
    .await
    .map_err(|_| "no snapshot showed s-a within 20 s")??;
    assert!(!owed.acknowledged, "s-a acknowledged before any ack");
    // Keep reading the stream, so F's pushes never fill it.
    let reader = tokio::spawn(async move { while let Ok(Some(_)) = inbound.message().await {} });

    eprintln!("--- step: gateways {others:?} stop; m-a sends its one ack");
    for id in &others {
        cluster.get(*id).signal("-STOP");
    }
    let stopped = scopeguard_continue(&cluster, &others);
    tx.send(term_ack(&owed)).await?;
    eventually("F says the ack was not applied", || async {
        match cluster
            .get(follower)
            .log()
            .contains("supervisor command not applied")
        {
            true => Ok(()),
            false => Err("not yet".into()),
        }
    })
    .await;
    drop(stopped);

    eprintln!("--- step: the two continue; s-a must be acknowledged without a resend");
    eventually("s-a assigned and acknowledged by m-a", || async {
        match sandbox(cluster.get(follower)).await? {
            (owner, 1, SandboxPhase::Assigned, true) if owner == "m-a" => Ok(()),
            other => Err(format!("s-a is {other:?}").into()),
        }
    })
    .await;
    reader.abort();
    Ok(())
}

/// Sends SIGCONT to `ids` when dropped, so a failing step never leaves a
/// gateway stopped.
fn scopeguard_continue<'a>(cluster: &'a Cluster, ids: &'a [u64]) -> impl Drop + 'a {
    struct Continue<'a>(&'a Cluster, &'a [u64]);
    impl Drop for Continue<'_> {
        fn drop(&mut self) {
            for id in self.1 {
                self.0.get(*id).signal("-CONT");
            }
        }
    }
    Continue(cluster, ids)
}
