//! Authentication before decoding (issue 13, "Bounded input"): 64 concurrent
//! 64 MiB requests on the client port leave the gateway small and serving.
//!
//! - given: one gateway with an admin token
//! - when: 64 raw HTTP/2 gRPC calls (ObjectStore Put, ClusterAdmin Backup,
//!   PoolAdmin CreateSandbox in turn), one per connection, each announcing a
//!   64 MiB message and streaming its body, without a token
//! - then: every one fails fast with UNAUTHENTICATED, refused from its
//!   headers (or its stream is reset); the gateway's VmRSS, sampled
//!   throughout, stays under 256 MiB; an authenticated put succeeds during
//!   and after the flood
//! - when: the same flood with the valid token
//! - then: every call fails with OUT_OF_RANGE / RESOURCE_EXHAUSTED (the
//!   2 MiB limit), RSS stays under 256 MiB, and the gateway keeps serving
//!
//! Both on a plaintext `--insecure` gateway and on a secure one (the calls
//! then arrive over TLS on its client port).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proto::objects::{precondition, Precondition, PutRequest};
use testkit::gateway::*;
use testkit::TestResult;

const TOKEN: &str = "flood-admin-s3cret";
const CLAIMED: usize = 64 * 1024 * 1024;
const CALLS: usize = 64;
const RSS_BOUND_KIB: u64 = 256 * 1024;
const PATHS: [&str; 3] = [
    "/openshell.objects.v1.ObjectStore/Put",
    "/openshell.cluster.v1.ClusterAdmin/Backup",
    "/openshell.pool_admin.v1.PoolAdmin/CreateSandbox",
];

/// VmRSS of `pid` in KiB (0 once the process is gone).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// One raw gRPC call on its own connection: a 5-byte frame header claiming
/// [`CLAIMED`] bytes, then the body streamed in 1 MiB pieces while the
/// server lets it. Returns the grpc-status (None if the stream was reset
/// or the connection dropped before one came) and how long until it came.
async fn raw_call(
    addr: String,
    path: &str,
    token: Option<String>,
    tls: Option<proto::tls::ClientTls>,
) -> (Option<i32>, Duration) {
    let started = Instant::now();
    let client = match tls {
        None => match tokio::net::TcpStream::connect(&addr).await {
            Ok(tcp) => h2_handshake(tcp).await,
            Err(_) => None,
        },
        Some(tls) => match tls.connect(&addr).await {
            Ok(stream) => h2_handshake(stream).await,
            Err(_) => None,
        },
    };
    let Some(client) = client else {
        return (None, started.elapsed());
    };
    let mut request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let Ok(request) = request.body(()) else {
        return (None, started.elapsed());
    };
    let Ok(mut client) = client.ready().await else {
        return (None, started.elapsed());
    };
    let Ok((response, mut body)) = client.send_request(request, false) else {
        return (None, started.elapsed());
    };
    let sender = tokio::spawn(async move {
        let mut header = vec![0u8];
        header.extend_from_slice(&(CLAIMED as u32).to_be_bytes());
        if body.send_data(Bytes::from(header), false).is_err() {
            return;
        }
        let piece = Bytes::from(vec![0x2a; 1024 * 1024]);
        let mut sent = 0;
        while sent < CLAIMED {
            body.reserve_capacity(piece.len());
            let granted = match std::future::poll_fn(|cx| body.poll_capacity(cx)).await {
                Some(Ok(n)) => n,
                _ => return,
            };
            let n = granted.min(CLAIMED - sent);
            if body
                .send_data(piece.slice(..n), sent + n == CLAIMED)
                .is_err()
            {
                return;
            }
            sent += n;
        }
    });
    let status = match tokio::time::timeout(Duration::from_secs(60), response).await {
        Ok(Ok(response)) => {
            let from_headers = grpc_status(response.headers());
            match from_headers {
                Some(code) => Some(code),
                None => {
                    let mut body = response.into_body();
                    while let Some(Ok(_)) = body.data().await {}
                    match body.trailers().await {
                        Ok(Some(trailers)) => grpc_status(&trailers),
                        _ => None,
                    }
                }
            }
        }
        _ => None,
    };
    let took = started.elapsed();
    sender.abort();
    (status, took)
}

/// An HTTP/2 client over `io`, its connection driven in the background.
async fn h2_handshake<T>(io: T) -> Option<h2::client::SendRequest<Bytes>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (client, connection) = h2::client::handshake(io).await.ok()?;
    tokio::spawn(connection);
    Some(client)
}

/// The admin token `node` accepts.
fn token_of(node: &Gateway) -> String {
    node.security
        .as_ref()
        .map(|s| s.token.clone())
        .unwrap_or_else(|| TOKEN.to_string())
}

fn grpc_status(headers: &http::HeaderMap) -> Option<i32> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

async fn authenticated_put(node: &Gateway, id: &str) -> TestResult {
    let mut request = tonic::Request::new(PutRequest {
        object: Some(object(id, "v")),
        precondition: Some(Precondition {
            kind: Some(precondition::Kind::Unconditional(true)),
        }),
        request_id: String::new(),
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", token_of(node)).parse()?,
    );
    node.objects().await?.put(request).await?;
    Ok(())
}

/// Floods `node` with [`CALLS`] calls (with `token` or none) while sampling
/// its RSS and putting with the token; returns each call's (status, time)
/// and the largest RSS seen, in KiB.
async fn flood(
    node: &Gateway,
    with_token: bool,
) -> TestResult<(Vec<(Option<i32>, Duration)>, u64)> {
    let token = with_token.then(|| token_of(node));
    let tls = node.security.as_ref().map(|s| s.tls.clone());
    let pid = node.pid().ok_or("gateway not running")?;
    let max_rss = Arc::new(AtomicU64::new(rss_kib(pid)));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (max_rss, done) = (max_rss.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                max_rss.fetch_max(rss_kib(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            tokio::spawn(raw_call(
                node.addr.clone(),
                PATHS[i % PATHS.len()],
                token.clone(),
                tls.clone(),
            ))
        })
        .collect();
    // Served during the flood.
    authenticated_put(node, "during").await?;
    let mut outcomes = Vec::new();
    for call in calls {
        outcomes.push(call.await?);
    }
    done.store(true, Ordering::Relaxed);
    sampler.await?;
    max_rss.fetch_max(rss_kib(pid), Ordering::Relaxed);
    Ok((outcomes, max_rss.load(Ordering::Relaxed)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_64_mib_requests_are_refused_before_decoding() -> TestResult {
    let cluster = Cluster::start(1, &["--admin-token", TOKEN]);
    flood_scenario(cluster.get(1)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_flood_over_tls_on_a_secure_gateway() -> TestResult {
    let cluster = Cluster::start_secure(1, &[]);
    flood_scenario(cluster.get(1)).await
}

async fn flood_scenario(node: &Gateway) -> TestResult {
    eventually("an authenticated put", || authenticated_put(node, "before")).await;
    let baseline = rss_kib(node.pid().ok_or("gateway not running")?);
    eprintln!("baseline VmRSS {baseline} KiB");

    eprintln!("--- step: {CALLS} unauthenticated 64 MiB calls");
    let (outcomes, max_rss) = flood(node, false).await?;
    eprintln!("max VmRSS {max_rss} KiB; outcomes {outcomes:?}");
    for (i, (status, took)) in outcomes.iter().enumerate() {
        // 16: UNAUTHENTICATED; None: the stream was reset.
        assert!(
            matches!(status, Some(16) | None),
            "call {i} ({}) ended with grpc-status {status:?}, not UNAUTHENTICATED",
            PATHS[i % PATHS.len()]
        );
        assert!(*took < Duration::from_secs(20), "call {i} took {took:?}");
    }
    assert!(
        outcomes.iter().filter(|(s, _)| *s == Some(16)).count() >= CALLS / 2,
        "most calls must be answered UNAUTHENTICATED: {outcomes:?}"
    );
    assert!(max_rss < RSS_BOUND_KIB, "VmRSS reached {max_rss} KiB");
    authenticated_put(node, "after").await?;

    eprintln!("--- step: {CALLS} authenticated 64 MiB calls");
    let (outcomes, max_rss) = flood(node, true).await?;
    eprintln!("max VmRSS {max_rss} KiB; outcomes {outcomes:?}");
    for (i, (status, took)) in outcomes.iter().enumerate() {
        // 11: OUT_OF_RANGE, 8: RESOURCE_EXHAUSTED; None: reset.
        assert!(
            matches!(status, Some(11) | Some(8) | None),
            "call {i} ended with grpc-status {status:?}"
        );
        assert!(*took < Duration::from_secs(20), "call {i} took {took:?}");
    }
    assert!(max_rss < RSS_BOUND_KIB, "VmRSS reached {max_rss} KiB");
    authenticated_put(node, "after-valid").await?;
    assert!(node.is_running(), "the gateway exited");
    Ok(())
}
