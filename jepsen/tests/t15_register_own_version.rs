//! t15: the register workload's own-version cas mode (a cas puts matching
//! the version the client's own last read or write returned, no read first)
//! stays linearizable, with one resource version per write, on the correct
//! gateway (20 s of ops, 22-48 s in all here; t55 proves the same run catches
//! shared versions).
//!
//! - given: 3 gateways in their own network namespaces
//! - when: 16 clients read/write/cas 2 registers, 0-5 ms apart, for 20 s,
//!   no nemesis (the leader batches writes of one register into one entry)
//! - then: every checker says valid (`linearizable`,
//!   `one-version-per-write`, ...), and successful cas ops were recorded

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_version_cas_is_linearizable_with_one_version_per_write() {
    if common::skip_without_root("jepsen::t15_register_own_version") {
        return;
    }
    eprintln!("--- step: find the gateway binary");
    let bin = common::gateway_bin();
    eprintln!("--- step: 20 s of own-version cas on 2 registers, 16 clients");
    let options = common::own_version_options("t15-own-version", bin, "none", 20, 15);
    let (outcome, history) = common::run_expecting_valid(options).await;
    assert!(
        outcome
            .results
            .iter()
            .any(|r| r.checker == "one-version-per-write"),
        "the one-version-per-write checker did not run"
    );
    let cas_ok = history
        .lines()
        .filter(|l| l.contains("\"type\":\"ok\"") && l.contains("\"f\":\"cas\""))
        .count();
    assert!(cas_ok > 0, "no cas succeeded: the mode was not exercised");
    assert!(
        history.contains("\"resource_version\":"),
        "no op recorded a resource_version"
    );
}
