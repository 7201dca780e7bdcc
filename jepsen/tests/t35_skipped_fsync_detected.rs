//! t35: the power-cut nemesis bites where `kill -9` cannot. A gateway built
//! with `fault-skip-fdatasync` acknowledges writes after sled's flush alone
//! (`sync_file_range`, sled issue #1452): durable across `kill -9` (the page
//! cache survives), lost on power loss.
//!
//! - given: the gateway built with `--features fault-skip-fdatasync` into
//!   `target/jepsen-fault`
//! - when: register ops while the `power-cut` nemesis cuts a majority at
//!   once, 6 times, on lazyfs
//! - then: the run is not valid, and a checker (linearizable,
//!   acknowledged-writes or replicas-identical) says invalid

mod common;

use std::time::Duration;

use jepsen::checker::Validity;
use jepsen::power::{CutNodes, PowerOptions};

// Not in the default `cargo test` run: it builds a second gateway. Run with:
//   cargo test -p jepsen --test t35_skipped_fsync_detected -- --ignored --nocapture
#[ignore = "builds a second gateway; run with -- --ignored"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipped_fdatasync_loses_acknowledged_writes_on_power_cuts() {
    if common::skip_without_root("jepsen::t35_skipped_fsync_detected") {
        return;
    }
    eprintln!("--- step: build the faulty gateway into target/jepsen-fault");
    let bin = common::build_fault_gateway("fault-skip-fdatasync");
    let lazyfs = testkit::bins::workspace_bin("openshell-lazyfs");
    eprintln!("--- step: cut the power of a majority, 6 times");
    let mut options = common::options("t35-skip-fdatasync", bin, "power-cut", 90, 35);
    options.schedule.quiet = (Duration::from_millis(1500), Duration::from_millis(2500));
    options.schedule.hold = (Duration::from_millis(300), Duration::from_millis(800));
    options.power = PowerOptions {
        lazyfs_bin: Some(lazyfs),
        cuts: Some(6),
        nodes: CutNodes::Majority,
    };
    let outcome = jepsen::run::run(options)
        .await
        .unwrap_or_else(|e| panic!("the run could not be carried out: {e:#}"));
    for r in &outcome.results {
        eprintln!("{}: {:?} {}", r.checker, r.valid, r.summary);
    }
    eprintln!("{}", common::results_text(&outcome.dir));
    assert!(
        outcome.results.iter().any(|r| r.valid == Validity::Invalid),
        "skipped fdatasyncs went unnoticed; report at {}/index.html",
        outcome.dir.display()
    );
    assert!(!outcome.valid);
}
