//! A gateway that runs but cannot write its supervisors' heartbeats sends
//! them to another gateway before they expire.
//!
//! Found by the simulation (`sim --seed 12`, before the fix): a gateway
//! removed from the group while still running kept its supervisors'
//! streams (it answers their keep-alives), none of their heartbeats was
//! written any more, and their sandboxes were left without an active owner.
//!
//! - given: 3 gateways (6 s heartbeat TTL), member `m-a` attached to a
//!   follower F (its list: F, then the leader), owning sandbox `s-a`
//! - when: F is removed from the group (`raft remove`) and keeps running
//! - then: F sends `m-a` away (`GatewayLeaving`, counted in
//!   `openshell_pool_supervisors_sent_away_total`) about half a TTL later,
//!   and `m-a` attaches to the leader with the incarnation it had. Which
//!   of the two reasons F gives depends on timing: a removed gateway that
//!   still knows the leader forwards its batches, and they commit, but it
//!   no longer applies them ("... is not applied on this gateway", the
//!   seed-1417 case); one that does not cannot write them at all ("no
//!   heartbeat batch written ...", seed 12)
//! - and: before the removal F counted m-a's heartbeat commands as
//!   `written` in `openshell_pool_heartbeat_commands_total`
//! - and: a whole TTL later `m-a` is still active and still owns `s-a` in
//!   the same term: nothing expired, nothing was taken over

use std::time::Duration;

use proto::cluster::RemoveRequest;
use testkit::gateway::*;
use testkit::on_follower::MemberOnFollower;
use testkit::supervisor::{http_args, metric};
use testkit::TestResult;

const SENT_AWAY: &str = "openshell_pool_supervisors_sent_away_total";
const WRITTEN: &str = r#"openshell_pool_heartbeat_commands_total{outcome="written"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_cannot_write_heartbeats_sends_its_supervisors_away() -> TestResult {
    let mut cluster = Cluster::start_each(
        3,
        &["--tick-interval-ms", "250", "--heartbeat-ttl-ms", "6000"],
        http_args,
    );
    let scenario = MemberOnFollower::start(&cluster, "t122").await?;
    let (leader, follower, gateways) = (scenario.leader, scenario.follower, &scenario.gateways);
    let before = scenario.kept(&cluster).await?;
    assert_eq!(
        scenario.attached_to(),
        vec![gateways[0].clone()],
        "m-a should be attached to the follower only"
    );

    eventually("F's heartbeat commands counted as written", || async {
        match metric(cluster.get(follower), WRITTEN).await {
            0 => Err("none yet".into()),
            _ => Ok(()),
        }
    })
    .await;

    eprintln!("--- step: remove follower {follower} from the group; it keeps running");
    cluster
        .get(leader)
        .admin()
        .await?
        .remove(RemoveRequest { id: follower })
        .await?;
    assert!(
        cluster.node(follower).is_running(),
        "the removed gateway must keep running"
    );

    eventually("m-a attached to the leader", || async {
        let seen = scenario
            .member
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if seen.attached_to.last() == Some(&gateways[1]) {
            Ok(())
        } else {
            Err(format!("attached to {:?}", seen.attached_to).into())
        }
    })
    .await;
    let sent_away = metric(cluster.get(follower), SENT_AWAY).await;
    assert!(
        sent_away >= 1,
        "{SENT_AWAY} on the removed gateway: {sent_away}"
    );
    let log = cluster.get(follower).log();
    let said = log
        .lines()
        .find(|l| l.contains("supervisors sent to other gateways"))
        .ok_or("the removed gateway does not say it sent its supervisors away")?;
    eprintln!("the removed gateway said: {said}");

    eprintln!("--- step: a whole TTL later, nothing expired and nothing moved");
    tokio::time::sleep(Duration::from_secs(7)).await;
    scenario.assert_kept(&cluster, &before).await?;
    assert_eq!(
        scenario.attached_to(),
        *gateways,
        "m-a attached once to each: the follower, then the leader"
    );
    Ok(())
}
