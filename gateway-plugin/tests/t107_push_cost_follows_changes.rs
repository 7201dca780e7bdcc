//! Assignment snapshot pushes cost what changed (issue 17 "Scale"), through
//! real gateway processes and scripted members.
//!
//! - given: three gateways (no sandbox driver, a long heartbeat TTL so no
//!   member expires on a loaded machine), 30 scripted members spread over
//!   them (member i attached to gateway i mod 3), and 1,000 sandboxes
//!   (the bound does not depend on the count; `openshell-bench scale` runs
//!   10,000 on release binaries) created through `PoolAdmin.CreateSandbox`
//! - when: every stream has converged, one more sandbox is created (one
//!   launch and one acknowledgement: the batches touch one sandbox)
//! - then: the push passes of all three gateways read a few sandbox records
//!   in all (`openshell_pool_push_sandboxes_examined_total`), never a
//!   rescan of all 1,001; and after 50 deletes every stream still shows
//!   exactly the sandboxes the pool gives its member (each member's
//!   assignments equal the pool's owners, all acknowledged)
//!
//! Before: on a loaded machine the first convergence step failed 3 runs in
//! 4 ("sb-01995 not acknowledged yet" after 180 s). A member resent the ack
//! of every assignment a snapshot still showed unacknowledged, snapshots
//! follow every applied batch, and each resent ack was a raft write on a
//! stream that proposes one command at a time: 2,000 sandboxes cost about
//! 70,000 ack writes, the streams fell minutes behind, and the passes
//! re-read one record per pass (310 over 310). Now a gateway skips an ack
//! its applied state already shows (`Hub::already_applied`), and a
//! supervisor (and the scripted member) resends an owed ack at most once a
//! second (`ACK_RESEND_AFTER`): the same run under four CPU burners
//! converges, and one more sandbox costs 3 records over 71 passes.
//! A `TermAck` whose write fails makes the hub send the whole view again
//! (`Hub::forget_shown`), so the supervisor resends it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use proto::pool_admin::{CreateSandboxRequest, DeleteSandboxRequest, ListSandboxesRequest};
use proto::pool_types::SandboxPhase;
use testkit::gateway::*;
use testkit::member::ScriptedMember;
use testkit::supervisor::{http_args, metric, pool_admin};
use testkit::TestResult;

/// Sandboxes in the pool.
const SANDBOXES: usize = 1_000;
/// Scripted members.
const MEMBERS: usize = 30;
/// Concurrent create calls.
const CLIENTS: usize = 32;

/// Sum of `name` over every gateway.
async fn total(cluster: &Cluster, name: &str) -> u64 {
    let mut sum = 0;
    for node in &cluster.nodes {
        sum += metric(node, name).await;
    }
    sum
}

/// Every live (slot-holding) sandbox's (owner, acknowledged), as the
/// leader's pool lists it.
async fn owners(node: &Gateway) -> TestResult<BTreeMap<String, (String, bool)>> {
    let mut client = pool_admin(node).await?;
    let mut out = BTreeMap::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_sandboxes(ListSandboxesRequest {
                page_size: 5000,
                page_token: token.clone(),
                ..Default::default()
            })
            .await?
            .into_inner();
        for s in page.sandboxes {
            let live = matches!(
                SandboxPhase::try_from(s.phase),
                Ok(SandboxPhase::Admitting | SandboxPhase::Assigned | SandboxPhase::Recovering)
            );
            if live {
                out.insert(s.id, (s.owner, s.acknowledged));
            }
        }
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        token = page.next_page_token;
    }
}

/// Ok when every member's stream shows exactly the live sandboxes the pool
/// gives it, every one acknowledged.
async fn converged(node: &Gateway, members: &[ScriptedMember]) -> TestResult {
    let pool = owners(node).await?;
    let mut wanted: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (id, (owner, acked)) in &pool {
        if !acked {
            return Err(format!("{id} not acknowledged yet").into());
        }
        wanted.entry(owner).or_default().insert(id);
    }
    for m in members {
        let seen = m.seen.lock().unwrap_or_else(|p| p.into_inner());
        let shown: BTreeSet<&str> = seen
            .assignments
            .values()
            .filter(|a| a.acknowledged)
            .map(|a| a.sandbox_id.as_str())
            .collect();
        let want = wanted.remove(m.member.as_str()).unwrap_or_default();
        if shown != want {
            return Err(format!(
                "{} shows {} acknowledged, the pool gives it {}",
                m.member,
                shown.len(),
                want.len()
            )
            .into());
        }
    }
    if let Some((owner, ids)) = wanted.into_iter().next() {
        return Err(format!("{} sandboxes owned by unknown {owner}", ids.len()).into());
    }
    Ok(())
}

/// Waits up to 180 s (a loaded machine: debug gateways) for every stream
/// to show exactly its member's sandboxes; on a timeout, says what each
/// member's stream shows of the sandboxes still unacknowledged and keeps
/// the gateways' logs.
async fn wait_converged(cluster: &Cluster, node: &Gateway, members: &[ScriptedMember], why: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        match converged(node, members).await {
            Ok(()) => return,
            Err(e) if std::time::Instant::now() > deadline => {
                diagnose(cluster, node, members).await;
                panic!("{why}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Prints, for every unacknowledged sandbox, its owner and what each
/// member's stream shows of it; copies the gateways' logs out of the
/// cluster's tempdir.
async fn diagnose(cluster: &Cluster, node: &Gateway, members: &[ScriptedMember]) {
    let Ok(pool) = owners(node).await else {
        return;
    };
    for (id, (owner, _)) in pool.iter().filter(|(_, (_, acked))| !acked).take(5) {
        eprintln!("{id}: owner {owner}, unacknowledged");
        for m in members {
            let seen = m.seen.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(a) = seen.assignments.get(id) {
                eprintln!("  {} shows it: {a:?}", m.member);
            }
            if &m.member == owner {
                eprintln!(
                    "  owner {} incarnation {} attached to {:?}, shows {} assignments",
                    m.member,
                    seen.incarnation,
                    seen.attached_to,
                    seen.assignments.len()
                );
            }
        }
    }
    let keep = std::env::temp_dir().join(format!("t107-logs-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&keep);
    for n in &cluster.nodes {
        let _ = std::fs::copy(&n.log_path, keep.join(format!("node-{}.log", n.id)));
    }
    eprintln!("gateway logs kept in {}", keep.display());
}

/// Creates `ids` through `node`, `CLIENTS` at a time.
async fn create_all(node: &Gateway, ids: Vec<String>) -> TestResult {
    let ids = Arc::new(ids);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let mut client = pool_admin(node).await?;
        let (ids, next) = (ids.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(id) = ids.get(i) else {
                    return Ok::<(), tonic::Status>(());
                };
                // An outcome unknown (leadership moved on a loaded
                // machine) is retried under the same launch id: create is
                // idempotent per launch id.
                let mut tries = 0;
                loop {
                    let created = client
                        .create_sandbox(CreateSandboxRequest {
                            sandbox_id: id.clone(),
                            launch_id: format!("launch-{id}"),
                            material_ref: "t107".into(),
                            request_id: String::new(),
                        })
                        .await;
                    tries += 1;
                    match created {
                        Ok(_) => break,
                        Err(s) if s.code() == tonic::Code::AlreadyExists && tries > 1 => break,
                        Err(s) if tries < 60 && s.code() != tonic::Code::InvalidArgument => {
                            tokio::time::sleep(Duration::from_millis(500)).await
                        }
                        Err(s) => return Err(s),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_touching_one_sandbox_examines_what_changed() -> TestResult {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[openshell.gateway.supervisor_pool]\nheartbeat_ttl_ms = 60000\n",
    )?;
    let config = config.display().to_string();
    let cluster = Cluster::start_each(
        3,
        // Calm raft timing: the test counts work, not time, and must not
        // spend its run on elections of a loaded machine.
        &[
            "--sandbox-driver",
            "none",
            "--config",
            &config,
            "--heartbeat-ms",
            "100",
            "--election-min-ms",
            "1000",
            "--election-max-ms",
            "2000",
        ],
        http_args,
    );
    let leader = cluster.wait_leader("a leader").await;
    let addrs: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let members: Vec<ScriptedMember> = (0..MEMBERS)
        .map(|i| {
            let mut gateways = addrs.clone();
            gateways.rotate_left(i % addrs.len());
            ScriptedMember::start(
                &format!("m-{i:02}"),
                i as u64 + 1,
                (2 * SANDBOXES / MEMBERS) as u32 + 8,
                gateways,
                Duration::from_millis(10),
            )
        })
        .collect();
    let node = cluster.get(leader);
    eventually("every member is attached", || async {
        let attached = total(&cluster, "openshell_pool_attached_supervisors").await;
        if attached as usize == MEMBERS {
            Ok(())
        } else {
            Err(format!("{attached} attached").into())
        }
    })
    .await;

    eprintln!("--- step: create {SANDBOXES} sandboxes");
    let ids: Vec<String> = (0..SANDBOXES).map(|i| format!("sb-{i:05}")).collect();
    create_all(node, ids.clone()).await?;
    wait_converged(&cluster, node, &members, "every stream shows its sandboxes").await;
    // Let the last acknowledgements' passes finish on every gateway.
    tokio::time::sleep(Duration::from_secs(1)).await;

    eprintln!("--- step: one more sandbox");
    let examined = "openshell_pool_push_sandboxes_examined_total";
    let passes = "openshell_pool_push_passes_total";
    let (examined_before, passes_before) = (
        total(&cluster, examined).await,
        total(&cluster, passes).await,
    );
    create_all(node, vec!["sb-new".into()]).await?;
    wait_converged(
        &cluster,
        node,
        &members,
        "the new sandbox reached its owner",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let examined_delta = total(&cluster, examined).await - examined_before;
    let passes_delta = total(&cluster, passes).await - passes_before;
    eprintln!(
        "one sandbox launched and acknowledged among {SANDBOXES}, {MEMBERS} streams on 3 gateways: \
         {examined_delta} sandbox records examined over {passes_delta} push passes"
    );
    // A launch and an acknowledgement touch one sandbox. A full rescan per
    // pass reads all 1,001 records each time; the passes together read the
    // records that changed, a few per gateway (3 measured under load).
    assert!(
        examined_delta <= 30,
        "{examined_delta} records examined for one touched sandbox over {passes_delta} passes"
    );

    eprintln!("--- step: delete 50 sandboxes; every stream converges");
    let mut client = pool_admin(node).await?;
    for id in ids.iter().step_by(SANDBOXES / 50) {
        client
            .delete_sandbox(DeleteSandboxRequest {
                sandbox_id: id.clone(),
                request_id: String::new(),
            })
            .await?;
    }
    wait_converged(
        &cluster,
        node,
        &members,
        "every stream shows its live sandboxes",
    )
    .await;
    assert_eq!(owners(node).await?.len(), SANDBOXES + 1 - 50);
    Ok(())
}
