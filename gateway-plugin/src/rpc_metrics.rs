//! Per-call gRPC metrics: a tower layer on every port's server that times
//! each call and counts it by service, method and status code, under the
//! names grpc-ecosystem's Go interceptors made standard:
//!
//! - `grpc_server_handling_seconds{grpc_service,grpc_method,grpc_code}`:
//!   from the request's arrival to the call's end (for a unary call, its
//!   response; for a stream, the stream's end);
//! - `grpc_server_handled_total{grpc_service,grpc_method,grpc_code}`: calls
//!   finished.
//!
//! The code is the `grpc-status` of the response headers (a call refused
//! or failed before any message: "trailers-only") or, otherwise, of the
//! trailers at the end of the body. A body dropped before its trailers (the
//! client went away) counts as `Canceled`, one that ends without them as
//! `Unknown`. Only well-formed paths become labels; a call to a method no
//! service has (`Unimplemented`) is counted under `unknown`, so a client
//! cannot grow the label space.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::{Body, Frame, SizeHint};
use prometheus::{HistogramVec, IntCounterVec};
use tonic::body::Body as TonicBody;
use tower::{Layer, Service};

use crate::metrics::{Reg, LATENCY_BUCKETS};

/// The labels of both families.
const LABELS: [&str; 3] = ["grpc_service", "grpc_method", "grpc_code"];

/// The per-call collectors. Cheap to clone.
#[derive(Clone)]
pub struct GrpcMetrics {
    /// Call durations.
    pub handling: HistogramVec,
    /// Calls finished.
    pub handled: IntCounterVec,
}

impl GrpcMetrics {
    /// Registers the collectors in `reg`.
    pub(crate) fn new(reg: &Reg<'_>) -> Self {
        GrpcMetrics {
            handling: reg.histogram_vec(
                "grpc_server_handling_seconds",
                "Time from a gRPC call's arrival to its end (a stream's: its last message), by service, method and status code",
                &LABELS,
                &LATENCY_BUCKETS,
            ),
            handled: reg.counter_vec(
                "grpc_server_handled_total",
                "gRPC calls finished on this gateway, by service, method and status code",
                &LABELS,
            ),
        }
    }
}

/// The layer: wraps a server's routes (`Server::layer`).
#[derive(Clone)]
pub struct RpcMetricsLayer {
    metrics: GrpcMetrics,
}

impl RpcMetricsLayer {
    /// Records into `metrics`.
    pub fn new(metrics: &crate::metrics::Metrics) -> Self {
        RpcMetricsLayer {
            metrics: metrics.grpc.clone(),
        }
    }
}

impl<S> Layer<S> for RpcMetricsLayer {
    type Service = RpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RpcMetrics {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service [`RpcMetricsLayer`] makes.
#[derive(Clone)]
pub struct RpcMetrics<S> {
    inner: S,
    metrics: GrpcMetrics,
}

impl<S, B> Service<http::Request<TonicBody>> for RpcMetrics<S>
where
    S: Service<http::Request<TonicBody>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    B: Body + Unpin,
{
    type Response = http::Response<Metered<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<TonicBody>) -> Self::Future {
        let call = Call {
            path: request.uri().path().to_string(),
            started: Instant::now(),
            metrics: self.metrics.clone(),
            done: false,
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            let mut call = call;
            let response = response.await?;
            if let Some(code) = code_of(response.headers()) {
                call.finish(code);
            }
            Ok(response.map(|body| Metered { body, call }))
        })
    }
}

/// One call being timed; records once (when finished, else when dropped).
struct Call {
    path: String,
    started: Instant,
    metrics: GrpcMetrics,
    done: bool,
}

impl Call {
    /// Records the call with `code` (the first time only).
    fn finish(&mut self, code: i32) {
        if self.done {
            return;
        }
        self.done = true;
        let code = code_name(code);
        let (service, method) = match split_path(&self.path) {
            Some(parts) if code != "Unimplemented" => parts,
            _ => ("unknown", "unknown"),
        };
        let labels = [service, method, code];
        self.metrics
            .handling
            .with_label_values(&labels)
            .observe(self.started.elapsed().as_secs_f64());
        self.metrics.handled.with_label_values(&labels).inc();
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // The body went away before its trailers: the client cancelled.
        self.finish(tonic::Code::Cancelled as i32);
    }
}

/// A response body that records its call at its trailers.
pub struct Metered<B> {
    body: B,
    call: Call,
}

impl<B: Body + Unpin> Body for Metered<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(code_of) {
                    this.call.finish(code);
                }
            }
            Poll::Ready(Some(Err(_))) => this.call.finish(tonic::Code::Unknown as i32),
            Poll::Ready(None) => this.call.finish(tonic::Code::Unknown as i32),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The `grpc-status` in `headers`, if any.
fn code_of(headers: &http::HeaderMap) -> Option<i32> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// `/package.Service/Method` as (`package.Service`, `Method`), if both
/// parts are plain identifiers of a sane length.
fn split_path(path: &str) -> Option<(&str, &str)> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    let plain = |s: &str, dots: bool| {
        !s.is_empty()
            && s.len() <= 128
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || (dots && c == '.'))
    };
    (plain(service, true) && plain(method, false)).then_some((service, method))
}

/// The code's name as grpc-go spells it (the label values dashboards made
/// for its interceptors expect).
fn code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "Canceled",
        2 => "Unknown",
        3 => "InvalidArgument",
        4 => "DeadlineExceeded",
        5 => "NotFound",
        6 => "AlreadyExists",
        7 => "PermissionDenied",
        8 => "ResourceExhausted",
        9 => "FailedPrecondition",
        10 => "Aborted",
        11 => "OutOfRange",
        12 => "Unimplemented",
        13 => "Internal",
        14 => "Unavailable",
        15 => "DataLoss",
        16 => "Unauthenticated",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_paths_become_labels() {
        assert_eq!(
            split_path("/openshell.pool_admin.v1.PoolAdmin/GetSupervisorPoolStatus"),
            Some((
                "openshell.pool_admin.v1.PoolAdmin",
                "GetSupervisorPoolStatus"
            ))
        );
        assert_eq!(split_path("/a.B/c/d"), None);
        assert_eq!(split_path("/a.B/c\u{e9}"), None);
        assert_eq!(split_path("nope"), None);
    }

    #[test]
    fn a_call_is_recorded_once_with_its_code() {
        let metrics = crate::metrics::Metrics::new();
        let mut call = Call {
            path: "/a.B/C".into(),
            started: Instant::now(),
            metrics: metrics.grpc.clone(),
            done: false,
        };
        call.finish(5);
        drop(call);
        let handled = &metrics.grpc.handled;
        assert_eq!(
            handled.with_label_values(&["a.B", "C", "NotFound"]).get(),
            1
        );
        assert_eq!(
            handled.with_label_values(&["a.B", "C", "Canceled"]).get(),
            0
        );
    }
}
