//! `worker_threads`: how many threads the gateway binary's async runtime
//! runs (issue 30 item 1: one worker costs a quiet gateway less CPU per
//! supervisor than one per CPU; docs/configuration.md).
//!
//! - given: one gateway started with `--worker-threads 1`
//! - then: it logs `runtime_workers=1` (read from the runtime it runs on,
//!   not from its configuration) and serves a write and a linearizable
//!   read
//! - when: it is stopped and started again with
//!   `OPENSHELL_WORKER_THREADS=3` and no flag
//! - then: it logs `runtime_workers=3` and still holds the write
//! - then: `--worker-threads 0` and `1025` are refused before anything
//!   starts, with one line naming `openshell.gateway.worker_threads` and
//!   its range

use std::process::Command;
use std::time::Duration;

use testkit::gateway::*;
use testkit::TestResult;

/// The `runtime_workers` a gateway's log announces, in order.
fn announced_workers(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("gateway listening"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|f| f.strip_prefix("runtime_workers="))
                .map(str::to_string)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_runs_the_worker_threads_it_is_given() -> TestResult<()> {
    eprintln!("--- step: one gateway with --worker-threads 1");
    let mut cluster = Cluster::start(1, &["--worker-threads", "1"]);
    cluster.wait_leader("a one-node cluster").await;
    let node = cluster.node(1);
    assert_eq!(announced_workers(&node.log()), ["1"], "{}", node.log());
    put(node, "k", "v1").await?;
    assert_eq!(get(node, "k", false).await?.as_deref(), Some("v1"));

    eprintln!("--- step: restarted with OPENSHELL_WORKER_THREADS=3 and no flag");
    node.signal("-TERM");
    assert!(
        node.wait_exit(Duration::from_secs(15)).await.is_some(),
        "the gateway did not stop on SIGTERM: {}",
        node.log()
    );
    // Drop exactly the flag and value the cluster was started with.
    assert_eq!(node.extra_args, ["--worker-threads", "1"]);
    node.extra_args.clear();
    node.start_with_env(&[("OPENSHELL_WORKER_THREADS", "3")]);
    cluster.wait_leader("the restarted node").await;
    let node = cluster.node(1);
    assert_eq!(announced_workers(&node.log()), ["1", "3"], "{}", node.log());
    assert_eq!(get(node, "k", false).await?.as_deref(), Some("v1"));

    eprintln!("--- step: 0 and 1025 are refused, naming the key");
    let args = node.args();
    for bad in ["0", "1025"] {
        let out = Command::new(testkit::bins::gateway_bin())
            .args(&args)
            .args(["--worker-threads", bad, "--check-config"])
            .env_remove("OPENSHELL_WORKER_THREADS")
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--worker-threads {bad} was accepted");
        assert!(
            stderr.contains("openshell.gateway.worker_threads") && stderr.contains("1..=1024"),
            "--worker-threads {bad}: {stderr}"
        );
    }
    Ok(())
}
