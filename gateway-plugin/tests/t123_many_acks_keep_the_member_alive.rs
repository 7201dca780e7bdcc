//! A supervisor acknowledging hundreds of new terms at once stays active:
//! its `HostStatus` is heard while its acknowledgements are written.
//!
//! Found by the scale run (issue 30): the member given 500 sandboxes at
//! once was expired 2.4 s after it attached, by its own acknowledgements.
//! The stream's reader proposed each `TermAck` and waited for its commit
//! before reading the next message, so the member's status messages queued
//! behind hundreds of commits, past the heartbeat TTL; its incarnation was
//! retired and every sandbox it held had to be taken over. Now a stream's
//! proposals are written in order by a writer of their own
//! (`gateway_plugin::hub::proposals`).
//!
//! - given: 3 gateways at the default heartbeat TTL (2 s) and tick
//!   (250 ms); member `m-a` (400 slots) attached to a follower, so every
//!   acknowledgement is forwarded to the leader
//! - when: 400 sandboxes are created, 32 at a time, all placed on `m-a`
//!   (the only member)
//! - then: `m-a` acknowledges every one in its first term, on the stream it
//!   first opened: it was never expired (one attach, the same
//!   incarnation) and nothing was taken over (every term is 1)

use std::sync::Arc;
use std::time::Duration;

use proto::pool_admin::{CreateSandboxRequest, ListSandboxesRequest};
use proto::pool_types::SandboxPhase;
use testkit::gateway::*;
use testkit::member::ScriptedMember;
use testkit::supervisor::{http_args, pool_admin};
use testkit::TestResult;

const SANDBOXES: usize = 400;

/// Every sandbox as the leader lists it: (id, owner, term, phase,
/// acknowledged).
async fn listed(node: &Gateway) -> TestResult<Vec<(String, String, u64, SandboxPhase, bool)>> {
    let mut client = pool_admin(node).await?;
    let mut out = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_sandboxes(ListSandboxesRequest {
                page_size: 100,
                page_token: page_token.clone(),
                ..Default::default()
            })
            .await?
            .into_inner();
        for s in page.sandboxes {
            let phase = SandboxPhase::try_from(s.phase)?;
            out.push((s.id, s.owner, s.term, phase, s.acknowledged));
        }
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        page_token = page.next_page_token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_acknowledging_hundreds_of_terms_stays_active() -> TestResult {
    let cluster = Cluster::start_each(
        3,
        &["--tick-interval-ms", "250", "--heartbeat-ttl-ms", "2000"],
        http_args,
    );
    let leader = cluster.wait_leader("a leader").await;
    let follower = (1..=3).find(|id| *id != leader).ok_or("no follower")?;
    eprintln!("--- step: m-a (400 slots) attaches to follower {follower}");
    let member = ScriptedMember::start(
        "m-a",
        1,
        SANDBOXES as u32,
        vec![cluster.get(follower).addr.clone()],
        Duration::ZERO,
    );
    member.wait_attached().await;
    let incarnation = member
        .seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .incarnation;

    eprintln!("--- step: {SANDBOXES} sandboxes created, 32 at a time");
    let admin = pool_admin(cluster.get(leader)).await?;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..32 {
        let (mut admin, next) = (admin.clone(), next.clone());
        clients.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= SANDBOXES {
                    return Ok::<(), tonic::Status>(());
                }
                admin
                    .create_sandbox(CreateSandboxRequest {
                        sandbox_id: format!("s{i:03}"),
                        launch_id: format!("launch-s{i:03}"),
                        material_ref: "t123".into(),
                        request_id: format!("t123-s{i:03}"),
                    })
                    .await?;
            }
        }));
    }
    for c in clients {
        c.await??;
    }

    eprintln!("--- step: every sandbox acknowledged by m-a");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let sandboxes = listed(cluster.get(leader)).await?;
        let acked = sandboxes.iter().filter(|s| s.4).count();
        if sandboxes.len() == SANDBOXES && acked == SANDBOXES {
            break;
        }
        if std::time::Instant::now() > deadline {
            let said: Vec<String> = (1..=3)
                .flat_map(|id| {
                    cluster
                        .get(id)
                        .log()
                        .lines()
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .filter(|l| l.contains("retired") || l.contains("not applied"))
                .take(5)
                .collect();
            panic!(
                "{acked} of {} acknowledged after 60 s; the gateways said: {said:#?}",
                sandboxes.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sandboxes = listed(cluster.get(leader)).await?;
    let moved: Vec<_> = sandboxes
        .iter()
        .filter(|(_, owner, term, phase, _)| {
            owner != "m-a" || *term != 1 || *phase != SandboxPhase::Assigned
        })
        .take(3)
        .collect();
    assert!(
        moved.is_empty(),
        "m-a was expired and its sandboxes taken over (first: {moved:?})"
    );
    let seen = member.seen.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(
        (seen.attached_to.len(), seen.incarnation),
        (1, incarnation),
        "m-a attached again or got a new incarnation: its first was retired"
    );
    Ok(())
}
