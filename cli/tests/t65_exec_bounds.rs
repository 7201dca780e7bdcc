//! `sandbox exec` reports cut output and refuses a timeout above its cap,
//! at every hop (issue 12 item 8).
//!
//! - given: one gateway, one supervisor, a running demo sandbox
//! - when: a command writes 2 MB on stdout; and exec is asked for a timeout
//!   above 60 s through the CLI and the gateway's `PoolAdmin.ExecSandbox`
//!   (the supervisor's own hop, an `ExecCall` on its stream, has no port a
//!   test could call: `supervisor::agent::exec`'s unit test checks it)
//! - then: the CLI prints the first 1 MiB, a line on stderr saying stdout
//!   was cut, and `-o json` flags `stdout_truncated` (not
//!   `stderr_truncated`); each timeout above the cap is refused
//!   (`INVALID_ARGUMENT`, CLI exit 2) naming the flag and the cap

mod common;

use common::cli::*;
use proto::pool_admin::ExecSandboxRequest;
use testkit::gateway::Cluster;
use testkit::supervisor::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_flags_cut_output_and_refuses_timeouts_above_the_cap() -> TestResult {
    let cluster = Cluster::start(1, &timing(FAST_TIMING));
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    cluster.wait_leader("bootstrap").await;
    let e = cluster.get(1).addr.clone();
    let mut supervisor = Supervisor::new("s1", vec![e.clone()], cluster.root.path());
    supervisor.start();
    wait_member(&cluster, "s1", "active").await;
    running_sandbox(&cluster, "sb-1").await;

    eprintln!("--- step: 2 MB on stdout, 10 bytes on stderr");
    let big = ["sandbox", "exec", "sb-1", "--", "sh", "-c"];
    let script = "head -c 2000000 /dev/zero; printf 0123456789 >&2";
    let mut args = big.to_vec();
    args.push(script);
    let (code, out, err) = pool(&e, &args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.len(), 1 << 20, "stdout is the first 1 MiB");
    assert!(
        err.starts_with("0123456789"),
        "the command's stderr first: {err:?}"
    );
    assert!(
        err.contains("stdout was cut at 1048576 bytes"),
        "no truncation line: {err:?}"
    );
    assert!(!err.contains("stderr was cut"), "{err:?}");
    let mut json_args = vec!["-o", "json"];
    json_args.extend(args.iter().copied());
    let (code, out, err) = pool(&e, &json_args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(
        v["stdout_truncated"], true,
        "stdout_truncated: {}",
        v["stderr"]
    );
    assert_eq!(v["stderr_truncated"], false, "stderr_truncated");
    assert!(err.contains("stdout was cut"), "{err:?}");
    let (code, out, err) = pool(
        &e,
        &["-o", "json", "sandbox", "exec", "sb-1", "--", "echo", "hi"],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(v["stdout"], "hi\n");
    assert_eq!(v["stdout_truncated"], false, "{v}");
    assert!(err.is_empty(), "{err:?}");

    eprintln!("--- step: a timeout above 60 s, through the CLI");
    let (code, _, err) = pool(
        &e,
        &[
            "sandbox",
            "exec",
            "sb-1",
            "--timeout-ms",
            "120000",
            "--",
            "true",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--timeout-ms") && err.contains("60000"),
        "{err}"
    );
    let (code, _, err) = pool(
        &e,
        &[
            "sandbox",
            "exec",
            "sb-1",
            "--timeout-ms",
            "60000",
            "--",
            "true",
        ],
    );
    assert_eq!(code, 0, "the cap itself is allowed: {err}");

    eprintln!("--- step: a timeout above 60 s, to the gateway");
    let refused = pool_admin(cluster.get(1))
        .await?
        .exec_sandbox(ExecSandboxRequest {
            sandbox_id: "sb-1".into(),
            argv: vec!["true".into()],
            timeout_ms: 120_000,
        })
        .await
        .err()
        .ok_or("the gateway accepted a 120 s timeout")?;
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused}");
    assert!(
        refused.message().contains("60000") && refused.message().contains("--timeout-ms"),
        "{refused}"
    );

    Ok(())
}
