//! An oversized report `status` is dropped before it is proposed, and the
//! supervisor's stream stays open (issue 16 §2), through a real gateway.
//!
//! - given: one gateway (no sandbox driver) and a member stream (the
//!   protocol of `testkit::member`) that owns sandbox `sb-r` and
//!   acknowledged its term
//! - when: it reports `before`, then a status of 2048 bytes (over the 1024
//!   limit), then `after`, on the same stream
//! - then: `before` is observed; the oversized status never is (the gateway
//!   logs `SandboxReport.status ... the report was dropped`); `after` is
//!   observed, so the stream was not closed

use std::time::Duration;

use proto::pool_admin::{CreateSandboxRequest, GetSandboxRequest};
use proto::supervisor_host::{
    gateway_message, supervisor_message, SandboxReport, SupervisorMessage,
};
use testkit::gateway::*;
use testkit::member::{attach, hello, spawn_pinger, term_ack};
use testkit::supervisor::pool_admin;
use testkit::TestResult;

fn report(sandbox: &str, generation: u64, term: u64, status: &str) -> SupervisorMessage {
    SupervisorMessage {
        message: Some(supervisor_message::Message::Report(SandboxReport {
            sandbox_id: sandbox.into(),
            generation,
            term,
            status: status.into(),
        })),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_report_status_is_dropped_and_the_stream_stays_open() -> TestResult {
    let cluster = Cluster::start(1, &["--sandbox-driver", "none"]);
    cluster.wait_leader("a leader").await;
    let node = cluster.get(1);
    let mut attached = attach(
        &node.addr,
        Duration::from_secs(2),
        hello("m-r", 7, 0, 4, "127.0.0.1:1".into()),
        64,
    )
    .await?;
    let (_never_paused, paused) = tokio::sync::watch::channel(false);
    let _pinger = spawn_pinger(attached.tx.clone(), Duration::from_millis(100), paused);

    eprintln!("--- step: create sb-r and acknowledge its term");
    eventually("create sb-r", || async {
        Ok(pool_admin(node)
            .await?
            .create_sandbox(CreateSandboxRequest {
                sandbox_id: "sb-r".into(),
                material_ref: "demo".into(),
                ..Default::default()
            })
            .await?)
    })
    .await;
    let assignment = loop {
        let message = tokio::time::timeout(Duration::from_secs(20), attached.inbound.message())
            .await??
            .ok_or("the stream ended")?;
        if let Some(gateway_message::Message::Snapshot(s)) = message.message {
            if let Some(a) = s.assignments.into_iter().find(|a| a.sandbox_id == "sb-r") {
                break a;
            }
        }
    };
    attached.tx.send(term_ack(&assignment)).await?;
    let (generation, term) = (assignment.generation, assignment.term);
    // Keep reading the stream (snapshots) so the gateway never blocks on it.
    let mut inbound = attached.inbound;
    tokio::spawn(async move { while let Ok(Some(_)) = inbound.message().await {} });
    let observed = || async {
        let s = pool_admin(node)
            .await?
            .get_sandbox(GetSandboxRequest {
                sandbox_id: "sb-r".into(),
                stale: false,
            })
            .await?
            .into_inner();
        TestResult::Ok(s.observed_status)
    };

    eprintln!("--- step: report `before`");
    attached
        .tx
        .send(report("sb-r", generation, term, "before"))
        .await?;
    eventually("`before` observed", || async {
        let status = observed().await?;
        if status.contains("before") {
            Ok(())
        } else {
            Err(format!("observed {status:?}").into())
        }
    })
    .await;

    eprintln!("--- step: report 2048 bytes, then `after`");
    let big = "y".repeat(2048);
    attached
        .tx
        .send(report("sb-r", generation, term, &big))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let status = observed().await?;
    assert!(
        !status.contains("yyyy"),
        "the oversized status was proposed and observed ({} bytes)",
        status.len()
    );
    attached
        .tx
        .send(report("sb-r", generation, term, "after"))
        .await?;
    eventually("`after` observed on the same stream", || async {
        let status = observed().await?;
        if status.contains("after") {
            Ok(())
        } else {
            Err(format!("observed {status:?}").into())
        }
    })
    .await;
    let log = node.log();
    assert!(
        log.contains("SandboxReport.status") && log.contains("the report was dropped"),
        "no warning for the dropped report:\n{log}"
    );
    Ok(())
}
