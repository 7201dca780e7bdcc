//! The runtime endpoint recorded in the replicated state reaches the owner
//! in its assignment and the operator in the sandbox status (issue 14,
//! docs/design/0003), through real `openshell-gateway` and
//! `openshell-pool` processes.
//!
//! The leader's launcher (which proposes `RecordRuntime`) is not part of
//! this test (its gateways run `--sandbox-driver none`; the supervision
//! scenarios in supervisor/tests run it), so the record enters the state the way an operator's restore
//! would bring it: a backup of a running cluster whose pool snapshot gains
//! the runtime record (snapshot field 10) is restored into a new gateway.
//!
//! - given: a one-gateway cluster, a scripted member owning `sb1`, whose
//!   assignment carries no runtime yet
//! - when: the state with `sb1`'s runtime recorded is restored into a new
//!   gateway and the member attaches to it
//! - then: the member's assignment carries the runtime endpoint (name,
//!   address, CA PEM); `GetSupervisorPoolStatus` and `openshell-pool
//!   sandbox list` show the runtime name and address
//! - when: the sandbox is deleted
//! - then: the released entry keeps the runtime endpoint
//! - when: the gateway is killed with `kill -9` and restarted
//! - then: the runtime record is still shown (it is durable state)

use std::process::Command;
use std::time::{Duration, Instant};

use pool::snapshot::{Record, RuntimeRecord, Snapshot};
use prost::Message;
use proto::backup::BackupHeader;
use proto::cluster::BackupRequest;
use proto::gateway::LogSnapshot;
use proto::pool_admin::DeleteSandboxRequest;
use proto::supervisor_host::{
    gateway_message, AssignmentSnapshot, GatewayMessage, RuntimeEndpoint, SandboxInstanceAssignment,
};
use testkit::gateway::*;
use testkit::member::{attach, hello, spawn_pinger, term_ack};
use testkit::supervisor::{create_sandbox, pool_admin, sandbox, wait_pool};
use testkit::TestResult;

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBdGVzdA==\n-----END CERTIFICATE-----\n";
const PROCESS: u64 = 41;

fn expected() -> RuntimeEndpoint {
    RuntimeEndpoint {
        name: "sb1-g1".into(),
        address: "10.1.0.5:7400".into(),
        ca_pem: CA.into(),
    }
}

/// The next assignment snapshot on `inbound` for which `done` holds.
async fn snapshot_where(
    inbound: &mut tonic::Streaming<GatewayMessage>,
    why: &str,
    done: impl Fn(&AssignmentSnapshot) -> bool,
) -> AssignmentSnapshot {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let next = tokio::time::timeout(left, inbound.message()).await;
        match next {
            Ok(Ok(Some(GatewayMessage {
                message: Some(gateway_message::Message::Snapshot(s)),
            }))) if done(&s) => return s,
            Ok(Ok(Some(_))) => {}
            other => panic!("no snapshot where {why}: {other:?}"),
        }
    }
}

fn entry<'a>(
    list: &'a [SandboxInstanceAssignment],
    id: &str,
) -> Option<&'a SandboxInstanceAssignment> {
    list.iter().find(|a| a.sandbox_id == id)
}

/// Adds `sb1`'s runtime record to the pool table of a gateway state.
fn with_runtime(state: &[u8]) -> Vec<u8> {
    let mut log = LogSnapshot::decode(state).unwrap_or_else(|e| panic!("log snapshot: {e}"));
    let mut pool = Snapshot::decode(log.pool.as_slice()).unwrap_or_else(|e| panic!("pool: {e}"));
    let mut found = false;
    for env in &mut pool.records {
        if let Some(Record::Sandbox(r)) = &mut env.record {
            if r.id == "sb1" {
                r.runtime = Some(RuntimeRecord {
                    name: expected().name,
                    address: expected().address,
                    ca_pem: expected().ca_pem,
                    recorded_index: 0,
                    driver_scope: String::new(),
                });
                found = true;
            }
        }
    }
    assert!(found, "sb1 is not in the backup");
    log.pool = pool.encode_to_vec();
    log.encode_to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_runtime_reaches_the_owner_and_the_operator() -> TestResult {
    // No launcher: the record comes from the restored state only (a
    // launcher would find no runtime at the made-up address and fail it).
    let mut first = Cluster::start(1, &["--sandbox-driver", "none"]);
    first.wait_leader("bootstrap").await;

    eprintln!("--- step: a member owns sb1; its assignment has no runtime yet");
    let mut m = attach(
        &first.get(1).addr,
        Duration::from_secs(5),
        hello("m1", PROCESS, 0, 4, "127.0.0.1:1".into()),
        64,
    )
    .await?;
    let pinger = spawn_pinger(
        m.tx.clone(),
        Duration::from_millis(100),
        tokio::sync::watch::channel(false).1,
    );
    create_sandbox(&first, "sb1").await;
    let snap = snapshot_where(&mut m.inbound, "sb1 assigned", |s| {
        entry(&s.assignments, "sb1").is_some()
    })
    .await;
    let a = entry(&snap.assignments, "sb1").ok_or("sb1")?.clone();
    assert_eq!(a.runtime, None, "no runtime recorded yet");
    m.tx.send(term_ack(&a)).await?;
    wait_pool(&first, "sb1 assigned", Duration::from_secs(20), |s| {
        sandbox(s, "sb1").is_some_and(|x| x.acknowledged)
    })
    .await;

    eprintln!(
        "--- step: back up the state, record sb1's runtime in it, restore into a new gateway"
    );
    let reply = first
        .get(1)
        .admin()
        .await?
        .backup(BackupRequest {})
        .await?
        .into_inner();
    let state = with_runtime(&reply.state);
    let scratch = tempfile::tempdir()?;
    let file = scratch.path().join("with-runtime.osbackup");
    let header = BackupHeader::for_state(
        reply.cluster_id,
        reply.term,
        reply.index,
        reply.taken_by_node,
        &state,
    );
    proto::backup::write(&file, &header, &state)?;
    pinger.abort();
    drop(m);
    first.node(1).kill9();
    let root = tempfile::tempdir()?;
    let mut gateway = Gateway::new(
        1,
        root.path(),
        vec!["--sandbox-driver".into(), "none".into()],
    );
    let out = Command::new(testkit::bins::gateway_bin())
        .args(["restore", "--from"])
        .arg(&file)
        .arg("--data-dir")
        .arg(&gateway.data_dir)
        .args(["--node-id", "1", "--advertise", &gateway.addr])
        .output()?;
    assert!(
        out.status.success(),
        "restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    gateway.start();
    let mut restored = Cluster {
        root,
        nodes: vec![gateway],
        material: None,
    };
    restored.wait_leader("restored gateway").await;

    eprintln!("--- step: the operator sees the runtime name and address");
    let status = wait_pool(&restored, "sb1 restored", Duration::from_secs(20), |s| {
        sandbox(s, "sb1").is_some()
    })
    .await;
    let s = sandbox(&status, "sb1").ok_or("sb1")?;
    assert_eq!(
        (s.runtime_name.as_str(), s.runtime_address.as_str()),
        ("sb1-g1", "10.1.0.5:7400"),
        "{s:?}"
    );
    let addr = restored.get(1).addr.clone();
    let cli = testkit::bins::workspace_bin("openshell-pool");
    let out = Command::new(&cli)
        .args([
            "--endpoints",
            &addr,
            "--insecure",
            "-o",
            "json",
            "sandbox",
            "list",
        ])
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cli: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: serde_json::Value = serde_json::from_str(&stdout)?;
    assert_eq!(list[0]["runtime_address"], "10.1.0.5:7400", "{stdout}");
    assert_eq!(list[0]["runtime_name"], "sb1-g1", "{stdout}");
    let out = Command::new(&cli)
        .args(["--endpoints", &addr, "--insecure", "sandbox", "list"])
        .output()?;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.lines().next().is_some_and(|h| h.contains("RUNTIME")),
        "{table}"
    );
    assert!(table.contains("10.1.0.5:7400"), "{table}");

    eprintln!(
        "--- step: the owner attaches to the restored gateway; its assignment carries the endpoint"
    );
    let mut m = attach(
        &addr,
        Duration::from_secs(5),
        hello(
            "m1",
            PROCESS,
            m_incarnation(&status),
            4,
            "127.0.0.1:1".into(),
        ),
        64,
    )
    .await?;
    let pinger = spawn_pinger(
        m.tx.clone(),
        Duration::from_millis(100),
        tokio::sync::watch::channel(false).1,
    );
    let snap = snapshot_where(&mut m.inbound, "sb1 with its runtime", |s| {
        entry(&s.assignments, "sb1").is_some()
    })
    .await;
    let a = entry(&snap.assignments, "sb1").ok_or("sb1")?;
    assert_eq!(a.runtime, Some(expected()));
    assert!(
        !a.grant.is_empty(),
        "the assignment still carries its grant"
    );

    eprintln!("--- step: delete sb1; the released entry keeps the endpoint");
    let node = restored.get(1);
    pool_admin(node)
        .await?
        .delete_sandbox(node.request(DeleteSandboxRequest {
            sandbox_id: "sb1".into(),
            request_id: String::new(),
        }))
        .await?;
    let snap = snapshot_where(&mut m.inbound, "sb1 released", |s| {
        entry(&s.released, "sb1").is_some()
    })
    .await;
    assert_eq!(
        entry(&snap.released, "sb1").ok_or("sb1")?.runtime,
        Some(expected())
    );
    pinger.abort();
    drop(m);

    eprintln!("--- step: kill -9 and restart the gateway; the record is still there");
    restored.node(1).kill9();
    restored.node(1).start();
    restored.wait_leader("restarted gateway").await;
    let status = wait_pool(
        &restored,
        "sb1 after restart",
        Duration::from_secs(20),
        |s| sandbox(s, "sb1").is_some(),
    )
    .await;
    let s = sandbox(&status, "sb1").ok_or("sb1")?;
    assert_eq!(s.runtime_address, "10.1.0.5:7400", "{s:?}");
    assert_eq!(s.phase, proto::pool_types::SandboxPhase::Deleted as i32);
    Ok(())
}

/// The incarnation the pool holds for `m1`.
fn m_incarnation(status: &proto::pool_admin::SupervisorPoolStatus) -> u64 {
    status
        .members
        .iter()
        .find(|m| m.id == "m1")
        .map(|m| m.incarnation)
        .unwrap_or(0)
}
