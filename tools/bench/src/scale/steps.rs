//! The scale run's steps, in order ([`all`]): attach the members, create
//! the sandboxes, the quiet window, one more sandbox, RSS, the takeover,
//! the restarts. Each fills its part of the [`ScaleReport`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use proto::pool_admin::CreateSandboxRequest;

use super::measure::{self, coordinator_counters, push_counters};
use super::members::{member_id, ScaleMembers};
use super::report::{EndCounts, Push, Restart, ScaleReport, Snapshots, Takeover};
use super::ScaleOptions;
use jepsen::cluster::Cluster;

/// Tries per create before the run fails.
const TRIES: usize = 20;

/// Every step, in order.
///
/// # Errors
/// When a step does not finish within the step timeout.
pub(super) async fn all(
    options: &ScaleOptions,
    cluster: &Arc<Cluster>,
    members: &mut ScaleMembers,
    report: &mut ScaleReport,
) -> anyhow::Result<()> {
    first_member(options, cluster, members).await?;
    members.open();
    wait_for(options, "every member attached", || {
        members.attached() >= options.members
    })
    .await?;
    report.attached = members.attached();
    tracing::info!(attached = report.attached, "members attached");
    create(options, cluster, members, report).await?;
    quiet(options, cluster, report).await?;
    one_more(options, cluster, members, report).await?;
    report.rss_mib = rss(cluster);
    tracing::info!(rss_mib = ?report.rss_mib, "gateway RSS");
    takeover(options, cluster, members, report).await?;
    report.snapshots = snapshots(cluster).await;
    tracing::info!(snapshots = ?report.snapshots, "snapshots");
    let restarted = restarts(options, cluster, members, report).await?;
    report.rss_end_mib = rss(cluster);
    report.end = end_counts(cluster, &restarted).await;
    tracing::info!(end = ?report.end, "at the end");
    Ok(())
}

/// Polls `done` every 50 ms until it holds or the step timeout passed.
async fn wait_for(
    options: &ScaleOptions,
    what: &str,
    mut done: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + options.step_timeout;
    while !done() {
        if Instant::now() > deadline {
            bail!("{what}: not within {:?}", options.step_timeout);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Every gateway's RSS, MiB.
fn rss(cluster: &Cluster) -> Vec<f64> {
    cluster
        .nodes
        .iter()
        .map(|n| {
            n.pid()
                .map_or(0.0, |p| crate::soak::sample::rss_bytes(p) as f64)
                / (1024.0 * 1024.0)
        })
        .collect()
}

/// Creates `ids` through the gateways (client `c` on gateway `c mod n`),
/// `concurrency` at a time, retrying calls whose outcome is unknown.
async fn create_ids(
    options: &ScaleOptions,
    cluster: &Arc<Cluster>,
    ids: Vec<String>,
) -> anyhow::Result<()> {
    let ids = Arc::new(ids);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..options.concurrency.max(1) {
        let (ids, next, cluster) = (ids.clone(), next.clone(), cluster.clone());
        tasks.push(tokio::spawn(async move {
            let n = cluster.nodes.len();
            loop {
                let Some(id) = ids.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    return Ok(());
                };
                let mut attempt = 0;
                loop {
                    let node = &cluster.nodes[(c + attempt) % n];
                    let request = CreateSandboxRequest {
                        sandbox_id: id.clone(),
                        launch_id: format!("launch-{id}"),
                        material_ref: format!("scale-{id}"),
                        request_id: String::new(),
                    };
                    match node.pool().create_sandbox(request).await {
                        Ok(_) => break,
                        Err(s) if s.code() == tonic::Code::AlreadyExists && attempt > 0 => break,
                        Err(s) if attempt + 1 >= TRIES => {
                            return Err(anyhow::anyhow!("creating {id}: {s}"));
                        }
                        Err(_) => {
                            attempt += 1;
                            tokio::time::sleep(Duration::from_millis(100 << attempt.min(4))).await;
                        }
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

/// Member 0 attaches alone and gets the first `takeover_size` sandboxes
/// (the only eligible member, with exactly that many slots): the member
/// the takeover kills.
async fn first_member(
    options: &ScaleOptions,
    cluster: &Arc<Cluster>,
    members: &ScaleMembers,
) -> anyhow::Result<()> {
    wait_for(options, "member 0 attached", || members.attached() >= 1).await?;
    let ids = (0..options.takeover_size)
        .map(|i| format!("sb0-{i:05}"))
        .collect();
    create_ids(options, cluster, ids).await?;
    wait_for(options, "member 0's sandboxes acknowledged", || {
        members.board.acknowledged() >= options.takeover_size
    })
    .await?;
    tracing::info!(
        sandboxes = options.takeover_size,
        "member 0 holds its sandboxes"
    );
    Ok(())
}

/// Each gateway's CPU seconds since `before`.
fn cpu_since(cluster: &Cluster, before: &[f64]) -> Vec<f64> {
    measure::cpu_by_node(cluster)
        .iter()
        .zip(before)
        .map(|(a, b)| a - b)
        .collect()
}

/// Creates the other sandboxes and waits until each is shown
/// acknowledged.
async fn create(
    options: &ScaleOptions,
    cluster: &Arc<Cluster>,
    members: &ScaleMembers,
    report: &mut ScaleReport,
) -> anyhow::Result<()> {
    let before = push_counters(cluster).await;
    let steps_before = coordinator_counters(cluster).await;
    let cpu_before = measure::cpu_by_node(cluster);
    let own = || measure::cpu_seconds(std::process::id() as i32);
    let own_before = own();
    let started = Instant::now();
    let ids: Vec<String> = (options.takeover_size..options.sandboxes)
        .map(|i| format!("sb{i:06}"))
        .collect();
    report.created = ids.len();
    create_ids(options, cluster, ids).await?;
    report.create_s = started.elapsed().as_secs_f64();
    report.create_cpu_s = cpu_since(cluster, &cpu_before);
    report.create_bench_cpu_s = own() - own_before;
    tracing::info!(seconds = report.create_s, cpu_s = ?report.create_cpu_s, "sandboxes created");
    wait_for(options, "every sandbox acknowledged", || {
        members.board.acknowledged() >= options.sandboxes
    })
    .await?;
    report.converge_s = started.elapsed().as_secs_f64();
    // The last acknowledgements' passes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = push_counters(cluster).await;
    report.push_bulk = Push::between(before, after, options.sandboxes as u64);
    report.coordinator_bulk = Push::between(
        steps_before,
        coordinator_counters(cluster).await,
        options.sandboxes as u64,
    );
    tracing::info!(seconds = report.converge_s, push = ?report.push_bulk, coordinator = ?report.coordinator_bulk, "every sandbox acknowledged");
    Ok(())
}

/// The quiet window: heartbeats and ticks only.
async fn quiet(
    options: &ScaleOptions,
    cluster: &Cluster,
    report: &mut ScaleReport,
) -> anyhow::Result<()> {
    report.quiet_leader = cluster
        .wait_leader(options.step_timeout, "before the quiet window")
        .await?;
    let before = push_counters(cluster).await;
    let steps_before = coordinator_counters(cluster).await;
    let attached_before = measure::attached_by_node(cluster).await;
    let beats_before = measure::count_by_node(cluster, measure::BEATS_WRITTEN).await;
    let cpu_before = measure::cpu_by_node(cluster);
    tokio::time::sleep(options.quiet).await;
    report.quiet_cpu_s = cpu_since(cluster, &cpu_before);
    let attached_after = measure::attached_by_node(cluster).await;
    let beats_after = measure::count_by_node(cluster, measure::BEATS_WRITTEN).await;
    report.quiet_beats = beats_before
        .into_iter()
        .zip(beats_after)
        .map(|(before, after)| Some(after?.saturating_sub(before?)))
        .collect();
    report.quiet_attached = attached_before.into_iter().zip(attached_after).collect();
    report.sent_away = measure::count_by_node(cluster, measure::SENT_AWAY).await;
    report.quiet_end_term = measure::count_by_node(cluster, measure::RAFT_TERM)
        .await
        .into_iter()
        .flatten()
        .max();
    let after = push_counters(cluster).await;
    report.push_quiet = Push::between(before, after, options.sandboxes as u64);
    report.coordinator_quiet = Push::between(
        steps_before,
        coordinator_counters(cluster).await,
        options.sandboxes as u64,
    );
    let leader = cluster
        .wait_leader(options.step_timeout, "after the quiet window")
        .await?;
    if leader != report.quiet_leader {
        tracing::warn!(
            before = report.quiet_leader,
            after = leader,
            "the leader changed during the quiet window: its CPU figures are not a quiet leader's"
        );
        report.quiet_leader_changed = true;
    }
    tracing::info!(push = ?report.push_quiet, coordinator = ?report.coordinator_quiet, cpu_s = ?report.quiet_cpu_s, attached = ?report.quiet_attached, sent_away = ?report.sent_away, term = ?report.quiet_end_term, "quiet window");
    Ok(())
}

/// Every gateway's latest snapshot size and the builds so far.
async fn snapshots(cluster: &Cluster) -> Snapshots {
    let mut out = Snapshots::default();
    let (mut sum, mut count) = (0.0, 0.0);
    for node in &cluster.nodes {
        out.size_bytes.push(
            measure::metric(node, measure::SNAPSHOT_SIZE)
                .await
                .unwrap_or(0.0),
        );
        let (s, c) = measure::histogram(node, measure::SNAPSHOT_BUILD).await;
        sum += s;
        count += c;
    }
    out.builds = count as u64;
    out.build_mean_s = if count > 0.0 { sum / count } else { 0.0 };
    out
}

/// One more sandbox: its launch and acknowledgement.
async fn one_more(
    options: &ScaleOptions,
    cluster: &Arc<Cluster>,
    members: &ScaleMembers,
    report: &mut ScaleReport,
) -> anyhow::Result<()> {
    let before = push_counters(cluster).await;
    create_ids(options, cluster, vec!["sb-one".into()]).await?;
    wait_for(options, "the one more sandbox acknowledged", || {
        members
            .board
            .shown("sb-one")
            .is_some_and(|s| s.acknowledged)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = push_counters(cluster).await;
    report.push_one = Push::between(before, after, options.sandboxes as u64 + 1);
    tracing::info!(push = ?report.push_one, "one more sandbox");
    Ok(())
}

/// Kills member 0 (it holds the first `takeover_size` sandboxes); times
/// the last of them shown acknowledged on a new owner's stream.
async fn takeover(
    options: &ScaleOptions,
    cluster: &Cluster,
    members: &mut ScaleMembers,
    report: &mut ScaleReport,
) -> anyhow::Result<()> {
    let victim = 0;
    let name = member_id(victim);
    let held = members.board.held_by(&name);
    let leader = cluster
        .wait_leader(options.step_timeout, "before the takeover")
        .await?;
    let leader_node = cluster.node(leader)?;
    let batches_before = measure::histogram(leader_node, measure::BATCH_COMMANDS).await;
    let steps_before = coordinator_counters(cluster).await;
    let before = push_counters(cluster).await;
    tracing::info!(member = %name, sandboxes = held.len(), "killing a member");
    let killed = Instant::now();
    members.kill(victim);
    let mut done: BTreeMap<String, Duration> = BTreeMap::new();
    let deadline = killed + options.step_timeout;
    while done.len() < held.len() && Instant::now() < deadline {
        for id in &held {
            if done.contains_key(id) {
                continue;
            }
            if let Some(s) = members.board.shown(id) {
                if let (true, Some(at)) = (s.member != name, s.acknowledged_at) {
                    done.insert(id.clone(), at.saturating_duration_since(killed));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = push_counters(cluster).await;
    report.push_takeover = Push::between(before, after, options.sandboxes as u64 + 1);
    report.coordinator_takeover = Push::between(
        steps_before,
        coordinator_counters(cluster).await,
        options.sandboxes as u64 + 1,
    );
    let batches_after = measure::histogram(leader_node, measure::BATCH_COMMANDS).await;
    let entries = batches_after.1 - batches_before.1;
    report.takeover_commands_per_entry = if entries > 0.0 {
        (batches_after.0 - batches_before.0) / entries
    } else {
        0.0
    };
    let all = done.len() == held.len();
    report.takeover = Takeover {
        member: name,
        sandboxes: held.len(),
        acknowledged: done.len(),
        seconds: all.then(|| done.values().max().map_or(0.0, Duration::as_secs_f64)),
        first_seconds: done.values().min().map(Duration::as_secs_f64),
    };
    tracing::info!(takeover = ?report.takeover, push = ?report.push_takeover, "takeover");
    Ok(())
}

/// `kill -9` and start a follower, then the leader; times each to
/// `/readyz` 200.
/// Elections, send-aways and takeovers at the end of the run; `restarted`:
/// the gateways the restarts killed.
async fn end_counts(cluster: &Cluster, restarted: &[usize]) -> EndCounts {
    let term = measure::count_by_node(cluster, measure::RAFT_TERM)
        .await
        .into_iter()
        .flatten()
        .max();
    let sent_away = measure::count_by_node(cluster, measure::SENT_AWAY).await;
    let heartbeats = measure::by_label_by_node(cluster, measure::HEARTBEAT_COMMANDS).await;
    let untouched = cluster.nodes.iter().find(|n| !restarted.contains(&n.id));
    let takeovers = match untouched {
        Some(node) => measure::metric(node, measure::TAKEOVERS)
            .await
            .map(|v| v.max(0.0) as u64),
        None => None,
    };
    EndCounts {
        term,
        sent_away,
        heartbeats,
        takeovers_node: untouched.map_or(0, |n| n.id),
        takeovers,
    }
}

/// Kills and restarts a follower, then the leader; returns their ids.
async fn restarts(
    options: &ScaleOptions,
    cluster: &Cluster,
    members: &ScaleMembers,
    report: &mut ScaleReport,
) -> anyhow::Result<Vec<usize>> {
    let leader = cluster
        .wait_leader(options.step_timeout, "before the restarts")
        .await?;
    let follower = cluster
        .nodes
        .iter()
        .map(|n| n.id)
        .find(|id| *id != leader)
        .ok_or_else(|| anyhow::anyhow!("no follower"))?;
    let alive = options.members - 1;
    for (id, role) in [(follower, "follower"), (leader, "leader")] {
        let node = cluster.node(id)?;
        node.kill9();
        let started = Instant::now();
        cluster.start(id)?;
        let ready = measure::wait_ready(node, started, options.step_timeout).await;
        let rss_mib = node
            .pid()
            .map_or(0.0, |p| crate::soak::sample::rss_bytes(p) as f64)
            / (1024.0 * 1024.0);
        let restart = Restart {
            node: id,
            role: role.to_string(),
            seconds: ready.map(|d| d.as_secs_f64()),
            rss_mib,
        };
        tracing::info!(?restart, "gateway restarted");
        report.restarts.push(restart);
        cluster.wait_converged(options.step_timeout).await?;
        wait_for(options, "every live member re-attached", || {
            members.attached() >= alive
        })
        .await?;
    }
    Ok(vec![follower, leader])
}
