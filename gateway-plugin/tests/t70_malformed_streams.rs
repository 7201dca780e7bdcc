//! Malformed supervisor streams, unknown ids, oversize messages and wrong
//! credentials get gRPC error statuses and log lines, never a panic; auth
//! failures are counted in metrics.

use std::time::Duration;

use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{ExecSandboxRequest, GetSandboxRequest};
use proto::supervisor_host::supervisor_host_client::SupervisorHostClient;
use proto::supervisor_host::{supervisor_message, HostHello, HostStatus, SupervisorMessage};
use testkit::gateway::*;
use testkit::ports::free_port;
use testkit::TestResult;
use tonic::Code;

async fn attach_with(node: &Gateway, first: SupervisorMessage) -> tonic::Status {
    let mut client = SupervisorHostClient::connect(format!("http://{}", node.addr))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let _ = tx.send(first).await;
    let result = client
        .attach(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await;
    match result {
        Err(status) => status,
        Ok(mut stream) => match stream.get_mut().message().await {
            Err(status) => status,
            Ok(m) => panic!("a malformed hello was accepted: {m:?}"),
        },
    }
}

/// A hello of process `process_id` (0 is malformed) asking for a new
/// incarnation.
fn hello(member: &str, capacity: u32, process_id: u64, credential: &str) -> SupervisorMessage {
    SupervisorMessage {
        message: Some(supervisor_message::Message::Hello(HostHello {
            member_id: member.into(),
            member_uid: "uid".into(),
            advertise_address: "127.0.0.1:1".into(),
            capacity,
            credential: credential.into(),
            process_id,
            ..HostHello::default()
        })),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_gets_error_statuses_and_is_counted() -> TestResult {
    let http = format!("127.0.0.1:{}", free_port());
    let cluster = Cluster::start(
        1,
        &[
            "--supervisor-token",
            "sup",
            "--admin-token",
            "adm",
            "--viewer-token",
            "view",
            "--http-listen",
            &http,
        ],
    );
    let node = cluster.get(1);
    eventually("gateway up", || async {
        Ok(
            tonic::transport::Endpoint::from_shared(format!("http://{}", node.addr))?
                .connect()
                .await?,
        )
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    eprintln!("--- step: malformed hellos");
    let status_first = SupervisorMessage {
        message: Some(supervisor_message::Message::Status(HostStatus::default())),
    };
    assert_eq!(
        attach_with(node, status_first).await.code(),
        Code::InvalidArgument
    );
    assert_eq!(
        attach_with(node, hello("", 1, 1, "sup")).await.code(),
        Code::InvalidArgument
    );
    assert_eq!(
        attach_with(node, hello(&"m".repeat(1000), 1, 1, "sup"))
            .await
            .code(),
        Code::InvalidArgument
    );
    assert_eq!(
        attach_with(node, hello("m1", 0, 1, "sup")).await.code(),
        Code::InvalidArgument
    );
    assert_eq!(
        attach_with(node, hello("m1", 1, 0, "sup")).await.code(),
        Code::InvalidArgument
    );
    assert_eq!(
        attach_with(node, hello("m1", 1, 1, "wrong")).await.code(),
        Code::Unauthenticated
    );
    assert_eq!(
        attach_with(node, SupervisorMessage { message: None })
            .await
            .code(),
        Code::InvalidArgument
    );

    eprintln!("--- step: unknown ids, oversize messages, wrong tokens");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.addr))?
        .connect()
        .await?;
    let token: tonic::metadata::AsciiMetadataValue = "Bearer adm".parse()?;
    let mut admin =
        PoolAdminClient::with_interceptor(channel.clone(), move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", token.clone());
            Ok(r)
        })
        .max_encoding_message_size(128 * 1024 * 1024);
    let missing = admin
        .get_sandbox(GetSandboxRequest {
            sandbox_id: "nope".into(),
            stale: false,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let exec = admin
        .exec_sandbox(ExecSandboxRequest {
            sandbox_id: "nope".into(),
            argv: vec!["true".into()],
            timeout_ms: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(exec.code(), Code::NotFound);
    let huge = admin
        .exec_sandbox(ExecSandboxRequest {
            sandbox_id: "x".repeat(80 * 1024 * 1024),
            argv: vec![],
            timeout_ms: 0,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            huge.code(),
            Code::ResourceExhausted | Code::OutOfRange | Code::Internal | Code::Unknown
        ),
        "{huge}"
    );
    let mut anonymous = PoolAdminClient::new(channel);
    let refused = anonymous
        .get_sandbox(GetSandboxRequest {
            sandbox_id: "nope".into(),
            stale: false,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);

    eprintln!("--- step: a viewer token may read but not change anything");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.addr))?
        .connect()
        .await?;
    let viewer: tonic::metadata::AsciiMetadataValue = "Bearer view".parse()?;
    let mut viewer_client =
        PoolAdminClient::with_interceptor(channel, move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", viewer.clone());
            Ok(r)
        });
    let read = viewer_client
        .get_sandbox(GetSandboxRequest {
            sandbox_id: "nope".into(),
            stale: false,
        })
        .await
        .unwrap_err();
    assert_eq!(read.code(), Code::NotFound, "a viewer may read: {read}");
    let write = viewer_client
        .create_sandbox(proto::pool_admin::CreateSandboxRequest {
            sandbox_id: "v".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(write.code(), Code::PermissionDenied, "{write}");
    assert!(write.message().contains("platform_admin"), "{write}");

    eprintln!("--- step: a newer stream of a member supersedes the older one");
    let mut first_client = SupervisorHostClient::connect(format!("http://{}", node.addr)).await?;
    let (tx1, rx1) = tokio::sync::mpsc::channel(4);
    tx1.send(hello("m-dup", 2, 7, "sup")).await?;
    let mut first = first_client
        .attach(tokio_stream::wrappers::ReceiverStream::new(rx1))
        .await?
        .into_inner();
    assert!(
        first.message().await?.is_some(),
        "first stream not accepted"
    );
    let mut second_client = SupervisorHostClient::connect(format!("http://{}", node.addr)).await?;
    let (tx2, rx2) = tokio::sync::mpsc::channel(4);
    tx2.send(hello("m-dup", 2, 7, "sup")).await?;
    let mut second = second_client
        .attach(tokio_stream::wrappers::ReceiverStream::new(rx2))
        .await?
        .into_inner();
    assert!(
        second.message().await?.is_some(),
        "second stream not accepted"
    );
    let closed = loop {
        match tokio::time::timeout(Duration::from_secs(5), first.message()).await {
            Ok(Ok(Some(_))) => continue, // assignment snapshots sent before the newer stream arrived
            Ok(Ok(None)) => panic!("the older stream ended without a status"),
            Ok(Err(status)) => break status,
            Err(_) => panic!("the older stream was not closed"),
        }
    };
    assert_eq!(closed.code(), Code::Aborted, "{closed}");
    drop((tx1, tx2));

    eprintln!("--- step: gateway health endpoints");
    assert!(reqwest_like_get(&http, "/healthz")
        .await
        .starts_with("HTTP/1.0 200"));
    let ready = reqwest_like_get(&http, "/readyz").await;
    assert!(
        ready.starts_with("HTTP/1.0 200") && ready.contains("leader 1"),
        "{ready}"
    );

    eprintln!("--- step: the gateway logged them, counted auth failures and never panicked");
    let body = reqwest_like_get(&http, "/metrics").await;
    let count = |service: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with("openshell_auth_failures_total") && l.contains(service))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(
        count("pool_admin") >= 1.0,
        "pool_admin auth failures not counted:\n{body}"
    );
    assert!(
        count("supervisor_host") >= 1.0,
        "supervisor auth failures not counted:\n{body}"
    );
    let log = node.log();
    assert!(
        log.contains("supervisor hello refused"),
        "no log line for refused hellos"
    );
    assert!(!log.contains("panicked"), "{log}");
    let still = admin
        .get_sandbox(GetSandboxRequest {
            sandbox_id: "nope".into(),
            stale: false,
        })
        .await
        .unwrap_err();
    assert_eq!(
        still.code(),
        Code::NotFound,
        "the gateway stopped serving: {still}"
    );
    Ok(())
}

/// GET over plain HTTP/1.0.
async fn reqwest_like_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return String::new();
    };
    let _ = stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await;
    let mut out = String::new();
    let _ = stream.read_to_string(&mut out).await;
    out
}
