//! A member is named in its gateway's heartbeat batch every other tick, not
//! every tick: its beats come at the rate of its statuses, and every
//! replica applies half as many (docs/architecture.md §4, step 3).
//!
//! Why: every replica of a group applies every member's beats, about 11 µs
//! of CPU a second per member at four beats a second, measured in
//! docs/benchmarks.md ("what a follower's quiet time is made of"): at
//! 2,000 members that was about a fifth of a follower's quiet cost.
//!
//! - given: 3 gateways at the default timing (250 ms ticks, 2 s TTL,
//!   statuses every 500 ms), member `m-a` attached to a follower F, owning
//!   sandbox `s-a`
//! - when: 5 s pass with nothing else happening
//! - then: F's written beats (`openshell_pool_heartbeat_beats_written_total`)
//!   are between a quarter and three quarters of the ticks the pool's time
//!   moved (about a half; the rule before named `m-a` at every tick, one
//!   per tick), and F counted no heartbeat command as anything but written
//! - and: `m-a` kept its incarnation and `s-a` its owner and term: naming
//!   it half as often expired nothing

use std::time::Duration;

use testkit::gateway::*;
use testkit::on_follower::MemberOnFollower;
use testkit::supervisor::{http_args, metric};
use testkit::TestResult;

const BEATS: &str = "openshell_pool_heartbeat_beats_written_total";
const NOW_TICKS: &str = "openshell_pool_now_ticks";
const WRITTEN: &str = r#"openshell_pool_heartbeat_commands_total{outcome="written"}"#;
const NOT_WRITTEN: [&str; 5] = [
    r#"openshell_pool_heartbeat_commands_total{outcome="timed_out_leading"}"#,
    r#"openshell_pool_heartbeat_commands_total{outcome="timed_out_following"}"#,
    r#"openshell_pool_heartbeat_commands_total{outcome="no_leader"}"#,
    r#"openshell_pool_heartbeat_commands_total{outcome="dropped"}"#,
    r#"openshell_pool_heartbeat_commands_total{outcome="failed"}"#,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_is_named_every_other_tick() -> TestResult {
    let cluster = Cluster::start_each(3, &[], http_args);
    let scenario = MemberOnFollower::start(&cluster, "t128").await?;
    let f = cluster.get(scenario.follower);
    let before = scenario.kept(&cluster).await?;
    eventually("F's heartbeat commands counted as written", || async {
        match metric(f, WRITTEN).await {
            0 => Err("none yet".into()),
            _ => Ok(()),
        }
    })
    .await;

    eprintln!("--- step: 5 s with nothing else happening");
    let (beats_0, ticks_0) = (metric(f, BEATS).await, metric(f, NOW_TICKS).await);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (beats_1, ticks_1) = (metric(f, BEATS).await, metric(f, NOW_TICKS).await);
    let (beats, ticks) = (beats_1 - beats_0, ticks_1 - ticks_0);
    eprintln!("F wrote {beats} beats of m-a while the pool's time moved {ticks} ticks");
    assert!(
        ticks >= 8,
        "the pool's time moved only {ticks} ticks in 5 s"
    );
    assert!(
        beats * 4 <= ticks * 3,
        "{beats} beats in {ticks} ticks: m-a is named (nearly) every tick"
    );
    assert!(
        beats * 4 >= ticks,
        "{beats} beats in {ticks} ticks: m-a is named less than every other tick"
    );
    for outcome in NOT_WRITTEN {
        assert_eq!(metric(f, outcome).await, 0, "{outcome} on F");
    }
    scenario.assert_kept(&cluster, &before).await
}
