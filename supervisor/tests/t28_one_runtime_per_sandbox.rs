//! Scenario 9: a supervisor never starts a second runtime for a sandbox.
//!
//! - given: three gateways and one supervisor whose runtimes linger 300 ms
//!   after their workload stops
//! - when: a sandbox is launched whose workload exits at once (`false`), so
//!   the runtime refuses the grant (nothing to supervise), the launch stays
//!   unacknowledged, the runtime exits, and the supervisor keeps retrying
//!   the term-1 activation from its snapshot (as it does with a stale
//!   snapshot after a takeover)
//! - then: in 6 s of retries exactly one runtime was ever started for it,
//!   and the supervisor says why it starts no other

use std::time::Duration;

use testkit::supervisor::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_runtime_is_not_started_again() -> TestResult {
    let (cluster, gateways, _cleanup) = three_gateways(&timing(FAST_TIMING)).await;
    let mut s1 = Supervisor::new("s1", gateways, cluster.root.path());
    s1.env
        .push(("OPENSHELL_RUNTIME_LINGER_MS".into(), "300".into()));
    s1.start();
    wait_member(&cluster, "s1", "active").await;

    eprintln!("--- step: launch a sandbox whose workload exits at once");
    create_sandbox_running(&cluster, "x", r#"["false"]"#).await;
    tokio::time::sleep(Duration::from_secs(6)).await;

    eprintln!("--- step: one runtime was ever started for it");
    let runtime_log = std::fs::read_to_string(s1.runtime_dir.join("x.log"))?;
    let starts = runtime_log.matches("serving SandboxRuntime").count();
    assert_eq!(starts, 1, "runtimes started for x:\n{runtime_log}");
    let log = s1.log();
    assert!(
        log.contains("not starting a second runtime for x"),
        "the supervisor did not say why:\n{log}"
    );
    Ok(())
}
