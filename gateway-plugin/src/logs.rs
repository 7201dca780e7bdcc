//! What the gateway adds to its log lines ([`proto::logs`] writes them):
//! the raft term of the moment, and one span per gRPC call with the
//! method and a request id ([`RpcLayer`]), closed by a DEBUG line
//! `call finished` with the gRPC code and the duration.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use raft_store::RaftNode;
use tracing::Instrument;

use crate::state::GatewayState;

/// A caller's `x-request-id` is kept if it is at most this long and
/// printable ASCII; otherwise the gateway makes one.
pub const MAX_REQUEST_ID_LEN: usize = 64;

/// Keeps [`proto::logs::set_term`] equal to the node's current term until
/// aborted (or raft stops).
pub async fn follow_term(node: RaftNode<GatewayState>) {
    let mut metrics = node.raft().metrics();
    loop {
        let term = metrics.borrow_and_update().current_term;
        proto::logs::set_term(term);
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// The span of one gRPC call: `rpc{method=/pkg.Service/Method
/// request_id=..}`. The request id is the caller's `x-request-id` header
/// when it is a usable one, else made here (unique within this process).
/// The raft transport's calls (many per second, between gateways) get no
/// span.
pub fn rpc_span<B>(request: &http::Request<B>) -> tracing::Span {
    let method = request.uri().path();
    if method.starts_with("/openshell.raft.v1.") {
        return tracing::Span::none();
    }
    let given = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| usable(v));
    match given {
        Some(id) => tracing::info_span!("rpc", method, request_id = %id),
        None => tracing::info_span!("rpc", method, request_id = %made_id()),
    }
}

/// The tower layer of every gateway gRPC server ([`crate::server`],
/// [`crate::embed::Gateway::server_builder`]): each call runs in its
/// [`rpc_span`] and ends with a DEBUG `call finished` line naming its gRPC
/// code (`grpc-status` of a trailers-only answer: how tonic answers an
/// error before any message; else `0`, OK so far, for an answer whose
/// status follows in trailers) and `elapsed_ms`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RpcLayer;

impl<S> tower::Layer<S> for RpcLayer {
    type Service = RpcService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RpcService { inner }
    }
}

/// [`RpcLayer`]'s service.
#[derive(Clone, Debug)]
pub struct RpcService<S> {
    inner: S,
}

impl<S, B, R> tower::Service<http::Request<B>> for RpcService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let span = rpc_span(&request);
        let started = Instant::now();
        let call = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        Box::pin(
            async move {
                let answered = call.await;
                let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
                match &answered {
                    Ok(response) => {
                        let code = response
                            .headers()
                            .get("grpc-status")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("0");
                        tracing::debug!(grpc_code = code, elapsed_ms, "call finished");
                    }
                    Err(_) => tracing::debug!(elapsed_ms, "call failed in transport"),
                }
                answered
            }
            .instrument(span),
        )
    }
}

/// Whether a caller's request id is kept: 1..=64 printable ASCII characters.
fn usable(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_REQUEST_ID_LEN && id.bytes().all(|b| b.is_ascii_graphic())
}

/// A request id unique within this process: a per-process prefix (from the
/// start time and pid) and a counter.
fn made_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static PREFIX: OnceLock<u32> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let prefix = *PREFIX.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        nanos ^ std::process::id().rotate_left(16)
    });
    format!("{prefix:08x}-{:x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_request_id_is_kept_only_when_short_and_printable() {
        assert!(usable("abc-123"));
        assert!(!usable(""));
        assert!(!usable(&"x".repeat(MAX_REQUEST_ID_LEN + 1)));
        assert!(!usable("has space"));
        assert!(!usable("new\nline"));
    }

    #[test]
    fn made_ids_differ() {
        assert_ne!(made_id(), made_id());
    }
}
