//! Identifiers are bounded input (issue 13, "Bounded input"): an id outside
//! the rule of `proto::ids` is refused at the API, names its field, and is
//! never turned into a file by the supervisor or the sandbox driver.
//!
//! - given: one gateway (the process driver over `<root>/runtimes`), one
//!   supervisor, a running sandbox `sb-ok`
//! - when: `sandbox create --id` is asked for `../x`, an absolute path, a
//!   300-character id, `x/../../y`, `..`, `.`, `a b` and `""` through the
//!   CLI; get / delete / exec with bad ids and a drain of a bad member
//!   through `PoolAdmin` over gRPC
//! - then: every one is refused (CLI exit 1, `INVALID_ARGUMENT`) naming
//!   `sandbox_id` (or `drain_member`); a workload command over 64 KiB is
//!   refused naming `material_ref`; no sandbox other than `sb-ok` exists,
//!   the driver directory holds `sb-ok`'s runtime entry only (its name the
//!   runtime name of `sb-ok`, generation 1), nothing was created elsewhere,
//!   and the directory is owner-only (0700)

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::cli::*;
use proto::pool_admin::start_supervisor_pool_operation_request::Kind;
use proto::pool_admin::{
    DeleteSandboxRequest, ExecSandboxRequest, GetSandboxRequest,
    StartSupervisorPoolOperationRequest,
};
use testkit::gateway::Cluster;
use testkit::supervisor::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_outside_the_rule_are_refused_and_never_become_paths() -> TestResult {
    let cluster = Cluster::start(1, &timing(FAST_TIMING));
    let root = cluster.root.path().to_path_buf();
    let _cleanup = KillUnder(root.clone());
    cluster.wait_leader("bootstrap").await;
    let e = cluster.get(1).addr.clone();
    let mut supervisor = Supervisor::new("s1", vec![e.clone()], &root);
    supervisor.start();
    wait_member(&cluster, "s1", "active").await;
    running_sandbox(&cluster, "sb-ok").await;

    eprintln!("--- step: bad ids through `sandbox create --id`");
    let absolute = root.join("abs").display().to_string();
    let long = "x".repeat(300);
    let bad = [
        "../x",
        absolute.as_str(),
        long.as_str(),
        "x/../../y",
        "..",
        ".",
        "a b",
        "",
    ];
    for id in bad {
        let (code, out, err) = pool(&e, &["sandbox", "create", "--id", id]);
        assert_eq!(code, 1, "create --id {id:?} not refused: {out} {err}");
        assert!(
            err.contains("invalid sandbox_id"),
            "create --id {id:?}: {err:?} does not name the field"
        );
    }

    eprintln!("--- step: bad ids through PoolAdmin over gRPC");
    let mut admin = pool_admin(cluster.get(1)).await?;
    for id in ["../x", "", "a b", long.as_str()] {
        let invalid = |r: Result<_, tonic::Status>, what: &str, field: &str| {
            let status = r.err().unwrap_or_else(|| panic!("{what} {id:?} accepted"));
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{what} {id:?}");
            assert!(status.message().contains(field), "{what}: {status:?}");
        };
        let r = admin
            .get_sandbox(GetSandboxRequest {
                sandbox_id: id.into(),
                ..Default::default()
            })
            .await;
        invalid(r.map(|_| ()), "get", "sandbox_id");
        let r = admin
            .delete_sandbox(DeleteSandboxRequest {
                sandbox_id: id.into(),
                request_id: String::new(),
            })
            .await;
        invalid(r.map(|_| ()), "delete", "sandbox_id");
        let r = admin
            .exec_sandbox(ExecSandboxRequest {
                sandbox_id: id.into(),
                argv: vec!["true".into()],
                timeout_ms: 1000,
            })
            .await;
        invalid(r.map(|_| ()), "exec", "sandbox_id");
        let r = admin
            .start_supervisor_pool_operation(StartSupervisorPoolOperationRequest {
                request_id: String::new(),
                kind: Some(Kind::DrainMember(id.into())),
                ..Default::default()
            })
            .await;
        invalid(r.map(|_| ()), "drain", "drain_member");
    }

    eprintln!("--- step: launch material over 64 KiB is refused, naming it");
    let big = serde_json::to_string(&vec!["x".repeat(64 * 1024)])?;
    let r = admin
        .create_sandbox(proto::pool_admin::CreateSandboxRequest {
            sandbox_id: "sb-big".into(),
            launch_id: String::new(),
            material_ref: big,
            request_id: String::new(),
        })
        .await;
    let status = r.err().ok_or("a 64 KiB workload command was admitted")?;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("material_ref"), "{status:?}");

    eprintln!("--- step: nothing admitted, nothing on disk");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let status = pool_status(&cluster).await?;
    let ids: Vec<_> = status.sandboxes.iter().map(|s| s.id.clone()).collect();
    assert_eq!(ids, vec!["sb-ok".to_string()], "only sb-ok was admitted");
    let runtimes = root.join("runtimes");
    // The driver's own lock files (`.lock`) aside, one entry per runtime.
    let mut names: Vec<_> = std::fs::read_dir(&runtimes)?
        .map(|d| d.map(|d| d.file_name().to_string_lossy().into_owned()))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [sandbox_driver::runtime_name("sb-ok", 1)],
        "runtime dir holds only sb-ok's runtime"
    );
    for stray in ["x.log", "x.addr", "abs.log", "abs.addr"] {
        assert!(!root.join(stray).exists(), "{stray} was created");
    }
    let mode = std::fs::metadata(&runtimes)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "runtime dir mode {mode:o}");
    Ok(())
}
