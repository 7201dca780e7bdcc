//! A follower whose answers take longer than the heartbeat interval still
//! acknowledges appends, so the leader commits with it (issue 33).
//!
//! Found in a Jepsen register run: after a gateway restarted, its appends
//! (entries plus an fsync on a loaded machine) took longer than 50 ms, and
//! the cluster made no commit for 4.5 s while that follower and the leader
//! were connected. openraft 0.9 gives every AppendEntries, catch-up batches
//! included, the heartbeat interval as its deadline and drops the call
//! there: the follower appended the entries, but its answer never reached
//! the leader, whose view of the follower never moved. With the other
//! follower away, no entry could commit.
//!
//! `testkit::proxy::PeerProxy` makes that deterministic: every chunk to and
//! from node 3 waits 40 ms, so every call to node 3 takes at least 80 ms.

use std::time::{Duration, Instant};

use testkit::gateway::Cluster;
use testkit::proxy::put_within;
use testkit::TestResult;

/// Added to every chunk each way: a round trip to node 3 takes at least
/// twice this, over the 50 ms heartbeat interval.
const DELAY: Duration = Duration::from_millis(40);

/// Writes made while node 3 is slow.
const WRITES: usize = 20;

/// - given: 3 gateways, node 1 the leader, node 3 behind a proxy; node 2
///   killed, so every commit needs node 3
/// - when: every call to node 3 takes at least 80 ms (over the heartbeat
///   interval), and 20 writes go through node 1
/// - then: every write commits, and node 3 applies them
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_commit_with_a_follower_slower_than_the_heartbeat_interval() -> TestResult {
    let (mut cluster, proxy) = Cluster::start_with_proxied_peer(3).await?;
    cluster.lead_with(1).await?;
    put_within(cluster.get(1), "before", Duration::from_secs(10)).await?;

    eprintln!("--- step: node 2 killed; every chunk to and from node 3 waits {DELAY:?}");
    cluster.node(2).kill9();
    proxy.set_delay(DELAY);

    let started = Instant::now();
    let mut last = 0;
    for n in 0..WRITES {
        match put_within(
            cluster.get(1),
            &format!("slow-{n}"),
            Duration::from_secs(10),
        )
        .await
        {
            Ok(index) => last = index,
            Err(e) => {
                cluster.dump_logs();
                panic!(
                    "write {n} of {WRITES} did not commit within 10 s with node 3 slow \
                     (no other follower left): {e}"
                );
            }
        }
    }
    eprintln!(
        "{WRITES} writes committed in {} ms with node 3 slow",
        started.elapsed().as_millis()
    );
    cluster
        .wait_applied(3, last, "the slow follower applies the writes")
        .await;
    Ok(())
}
