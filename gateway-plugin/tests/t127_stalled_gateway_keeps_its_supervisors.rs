//! A gateway that stalled (paused, or starved of CPU) keeps its supervisors
//! when it runs again: its silence counts from its waking, not as a cut-off
//! gateway's.
//!
//! Measured before the fix (docs/benchmarks.md, "a stalled gateway is not a
//! cut-off one"): at 100,000 sandboxes × 2,000 members, a stall of about
//! 1.2 s of every process left one gateway's heartbeat batches unwritten
//! while the leader's ticks went on; on waking, its first looks found the
//! silence past half the TTL and the pool's time half a TTL on, the signs
//! of a gateway cut off from its leader, and it sent 356 supervisors away,
//! onto gateways that shared its leader and its stall; members expired in
//! the re-attachment.
//!
//! - given: 3 gateways (6 s heartbeat TTL, 250 ms ticks: a batch may take
//!   3 s), member `m-a` attached to a follower F (its list: F, then the
//!   leader; no keep-alive pings, so its stream outlives the pause),
//!   owning sandbox `s-a`
//! - when: F is paused (SIGSTOP) for 4.5 s, longer than the 3 s a batch
//!   may take, while the leader's ticks move the pool's time 18 ticks (half
//!   the TTL is 12), then resumed (SIGCONT)
//! - then: F says it did not run for a while and counts its silence from
//!   then, writes `m-a`'s heartbeats again, and sends nobody away
//!   (`openshell_pool_supervisors_sent_away_total` stays 0)
//! - and: a whole TTL after the pause began, `m-a` is still attached to F
//!   only, with the incarnation it had, and still owns `s-a` in the same
//!   term: nothing expired, nothing was taken over

use std::time::Duration;

use testkit::gateway::*;
use testkit::on_follower::MemberOnFollower;
use testkit::supervisor::{http_args, metric};
use testkit::TestResult;

const SENT_AWAY: &str = "openshell_pool_supervisors_sent_away_total";
const WRITTEN: &str = r#"openshell_pool_heartbeat_commands_total{outcome="written"}"#;
const RESUMED: &str = "this gateway did not run for a while";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_stalled_keeps_its_supervisors() -> TestResult {
    let cluster = Cluster::start_each(
        3,
        &["--tick-interval-ms", "250", "--heartbeat-ttl-ms", "6000"],
        http_args,
    );
    let scenario = MemberOnFollower::start(&cluster, "t127").await?;
    let (follower, gateways) = (scenario.follower, &scenario.gateways);
    let before = scenario.kept(&cluster).await?;
    eventually("F's heartbeat commands counted as written", || async {
        match metric(cluster.get(follower), WRITTEN).await {
            0 => Err("none yet".into()),
            _ => Ok(()),
        }
    })
    .await;
    assert_eq!(
        cluster.get(follower).log().matches(RESUMED).count(),
        0,
        "F said it stalled before it was paused"
    );

    eprintln!("--- step: pause follower {follower} for 4.5 s, then resume it");
    let paused_at = tokio::time::Instant::now();
    cluster.get(follower).signal("-STOP");
    tokio::time::sleep(Duration::from_millis(4500)).await;
    cluster.get(follower).signal("-CONT");
    let written_at_resume = metric(cluster.get(follower), WRITTEN).await;

    eventually("F writes m-a's heartbeats again", || async {
        match metric(cluster.get(follower), WRITTEN).await {
            n if n > written_at_resume => Ok(()),
            n => Err(format!("{n} written, {written_at_resume} at the resume").into()),
        }
    })
    .await;
    eprintln!("--- step: a whole TTL after the pause began, nothing moved");
    tokio::time::sleep_until(paused_at + Duration::from_secs(7)).await;
    let sent_away = metric(cluster.get(follower), SENT_AWAY).await;
    assert_eq!(sent_away, 0, "{SENT_AWAY} on the stalled gateway");
    scenario.assert_kept(&cluster, &before).await?;
    assert_eq!(
        scenario.attached_to(),
        vec![gateways[0].clone()],
        "m-a left the stalled gateway"
    );
    let log = cluster.get(follower).log();
    let said = log
        .lines()
        .find(|l| l.contains(RESUMED))
        .ok_or("F does not say it did not run for a while")?;
    eprintln!("F said: {said}");
    Ok(())
}
