//! The scale run's steps, in order ([`all`]): attach the members, create
//! the sandboxes, the quiet window, one more sandbox, RSS, the takeover,
//! the restarts. Each fills its part of the [`ScaleReport`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use proto::pool_admin::CreateSandboxRequest;

use super::measure::{self, push_counters};
use super::members::{member_id, ScaleMembers};
use super::report::{Push, Restart, ScaleReport, Takeover};
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
    wait_for(options, "every member attached", || {
        members.attached() >= options.members
    })
    .await?;
    report.attached = members.attached();
    tracing::info!(attached = report.attached, "members attached");
    create(options, cluster, members, report).await?;
    quiet(options, cluster, report).await;
    one_more(options, cluster, members, report).await?;
    report.rss_mib = rss(cluster);
    tracing::info!(rss_mib = ?report.rss_mib, "gateway RSS");
    takeover(options, cluster, members, report).await?;
    restarts(options, cluster, members, report).await?;
    report.rss_end_mib = rss(cluster);
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

/// Creates every sandbox and waits until each is shown acknowledged.
async fn create(
    options: &ScaleOptions,
    cluster: &Arc<Cluster>,
    members: &ScaleMembers,
    report: &mut ScaleReport,
) -> anyhow::Result<()> {
    let before = push_counters(cluster).await;
    let started = Instant::now();
    let ids = (0..options.sandboxes)
        .map(|i| format!("sb{i:05}"))
        .collect();
    create_ids(options, cluster, ids).await?;
    report.create_s = started.elapsed().as_secs_f64();
    tracing::info!(seconds = report.create_s, "sandboxes created");
    wait_for(options, "every sandbox acknowledged", || {
        members.board.acknowledged() >= options.sandboxes
    })
    .await?;
    report.converge_s = started.elapsed().as_secs_f64();
    // The last acknowledgements' passes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = push_counters(cluster).await;
    report.push_bulk = Push::between(before, after, options.sandboxes as u64);
    tracing::info!(seconds = report.converge_s, push = ?report.push_bulk, "every sandbox acknowledged");
    Ok(())
}

/// The quiet window: heartbeats and ticks only.
async fn quiet(options: &ScaleOptions, cluster: &Cluster, report: &mut ScaleReport) {
    let before = push_counters(cluster).await;
    let cpu_before = measure::cpu_by_node(cluster);
    tokio::time::sleep(options.quiet).await;
    let cpu_after = measure::cpu_by_node(cluster);
    let after = push_counters(cluster).await;
    report.push_quiet = Push::between(before, after, options.sandboxes as u64);
    report.quiet_cpu_s = cpu_after
        .iter()
        .zip(&cpu_before)
        .map(|(a, b)| a - b)
        .collect();
    tracing::info!(push = ?report.push_quiet, cpu_s = ?report.quiet_cpu_s, "quiet window");
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

/// Kills the member holding closest to `takeover_size` sandboxes; times the
/// last of them shown acknowledged on a new owner's stream.
async fn takeover(
    options: &ScaleOptions,
    cluster: &Cluster,
    members: &mut ScaleMembers,
    report: &mut ScaleReport,
) -> anyhow::Result<()> {
    let (victim, held) = (0..options.members)
        .map(|i| (i, members.board.held_by(&member_id(i))))
        .min_by_key(|(_, held)| held.len().abs_diff(options.takeover_size))
        .ok_or_else(|| anyhow::anyhow!("no member"))?;
    let name = member_id(victim);
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
async fn restarts(
    options: &ScaleOptions,
    cluster: &Cluster,
    members: &ScaleMembers,
    report: &mut ScaleReport,
) -> anyhow::Result<()> {
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
    Ok(())
}
