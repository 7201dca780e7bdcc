//! Server limits and secrets from files, through real gateway processes.
//!
//! - given: a one-gateway cluster
//! - when: a supervisor stream is opened and sends nothing
//! - then: the gateway closes it with DEADLINE_EXCEEDED after its hello
//!   deadline (10 s), well before the test's own 40 s bound
//! - when: an ObjectStore put larger than the service's 2 MiB limit is sent
//! - then: it is refused with OUT_OF_RANGE (or RESOURCE_EXHAUSTED) before it
//!   is decoded, and the gateway keeps serving
//! - given: a gateway started with `--admin-token-file`
//! - then: the token in the file (its trailing newline trimmed) is accepted
//!   and a call without it is refused; a gateway given a missing file exits
//!   with rc 1 and names the flag and the path

use std::time::{Duration, Instant};

use proto::objects::{precondition, Precondition, PutRequest};
use proto::supervisor_host::supervisor_host_client::SupervisorHostClient;
use proto::supervisor_host::SupervisorMessage;
use testkit::gateway::*;
use testkit::TestResult;

/// A channel without any call deadline of its own.
async fn bare_channel(addr: &str) -> TestResult<tonic::transport::Channel> {
    Ok(
        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .connect()
            .await?,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_supervisor_stream_is_closed_and_oversized_puts_are_refused() -> TestResult {
    let cluster = Cluster::start(1, &[]);
    cluster.wait_leader("a leader").await;
    let node = cluster.get(1);
    put(node, "before", "v").await?;

    let mut host = SupervisorHostClient::new(bare_channel(&node.addr).await?);
    let started = Instant::now();
    let silent = tokio_stream::pending::<SupervisorMessage>();
    let outcome = tokio::time::timeout(Duration::from_secs(40), host.attach(silent)).await;
    let elapsed = started.elapsed();
    let status = match outcome {
        Err(_) => panic!("the silent supervisor stream was still open after {elapsed:?}"),
        Ok(Ok(_)) => panic!("the silent supervisor stream was accepted"),
        Ok(Err(status)) => status,
    };
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("HostHello"), "{status:?}");
    assert!(
        elapsed >= Duration::from_secs(9) && elapsed < Duration::from_secs(30),
        "closed after {elapsed:?}"
    );

    let big = "x".repeat(3 * 1024 * 1024);
    let refused = node
        .objects()
        .await?
        .put(PutRequest {
            object: Some(object("big", &big)),
            precondition: Some(Precondition {
                kind: Some(precondition::Kind::Unconditional(true)),
            }),
            request_id: String::new(),
        })
        .await
        .expect_err("a 3 MiB put must be refused");
    assert!(
        matches!(
            refused.code(),
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
        ),
        "{refused:?}"
    );
    put(node, "after", "v").await?;
    assert_eq!(get(node, "after", false).await?, Some("v".into()));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_tokens_come_from_files() -> TestResult {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("admin-token");
    std::fs::write(&file, "file-s3cret\n")?;
    let file_arg = file.display().to_string();
    let cluster = Cluster::start(1, &["--admin-token-file", &file_arg]);
    let node = cluster.get(1);
    let ps = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()?;
    assert!(!String::from_utf8_lossy(&ps.stdout).contains("file-s3cret"));

    // The token in the file (its newline trimmed) is accepted ...
    eventually("a put with the token from the file", || async {
        let mut request = tonic::Request::new(PutRequest {
            object: Some(object("k", "v")),
            precondition: Some(Precondition {
                kind: Some(precondition::Kind::Unconditional(true)),
            }),
            request_id: String::new(),
        });
        request
            .metadata_mut()
            .insert("authorization", "Bearer file-s3cret".parse()?);
        node.objects().await?.put(request).await?;
        Ok(())
    })
    .await;
    // ... and a call without it is refused.
    let refused = put(node, "open", "v").await.expect_err("no token: refused");
    assert!(refused.to_string().contains("bearer"), "{refused}");

    let missing = dir.path().join("no-such-token");
    let out = std::process::Command::new(testkit::bins::gateway_bin())
        .args([
            "--node-id",
            "9",
            "--listen",
            "127.0.0.1:0",
            "--cluster-id",
            "test",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--admin-token-file")
        .arg(&missing)
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--admin-token-file"), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    Ok(())
}
