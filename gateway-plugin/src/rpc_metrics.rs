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
//! `Unknown`.
//!
//! Labels come from a closed set ([`KnownMethods`]): the services and
//! methods of this workspace's `.proto` files, gRPC health and server
//! reflection, read from their compiled descriptors. A call to any other
//! path is counted with `grpc_method="unknown"` (and `grpc_service`
//! `unknown` too when the service is not one of them), whatever its code:
//! a caller, authenticated or not, cannot add a series by naming a new
//! method (issue 32: 10,000 unauthenticated calls to made-up methods had
//! added 58 MB to `/metrics`). A host embedding the gateway
//! ([`crate::embed`]) gets its own services counted under `unknown` too.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::{Body, Frame, SizeHint};
use prometheus::{HistogramVec, IntCounterVec};
use prost::Message;
use tonic::body::Body as TonicBody;
use tower::{Layer, Service};

/// The labels of both families.
pub(crate) const LABELS: [&str; 3] = ["grpc_service", "grpc_method", "grpc_code"];

/// The label value of a service or method outside [`KnownMethods`].
pub const UNKNOWN: &str = "unknown";

/// The closed set of (service, method) label values: every method of the
/// services whose descriptors are compiled in. Built once per process.
#[derive(Debug, Default)]
pub struct KnownMethods {
    /// Full service name (`openshell.pool_admin.v1.PoolAdmin`) -> its
    /// method names.
    services: BTreeMap<String, BTreeSet<String>>,
}

impl KnownMethods {
    /// The services of `descriptor_sets` (encoded `FileDescriptorSet`s).
    /// A set that does not decode is skipped with an error log: its
    /// services are then counted under `unknown`, never as the caller
    /// names them.
    pub fn from_descriptor_sets(descriptor_sets: &[&[u8]]) -> Self {
        let mut services = BTreeMap::<String, BTreeSet<String>>::new();
        for bytes in descriptor_sets {
            let set = match prost_types::FileDescriptorSet::decode(*bytes) {
                Ok(set) => set,
                Err(e) => {
                    tracing::error!(error = %e, "a compiled-in descriptor set does not decode; its services are counted as unknown");
                    continue;
                }
            };
            for file in set.file {
                let package = file.package.unwrap_or_default();
                for service in file.service {
                    let name = match (package.as_str(), service.name) {
                        (_, None) => continue,
                        ("", Some(name)) => name,
                        (package, Some(name)) => format!("{package}.{name}"),
                    };
                    let methods = services.entry(name).or_default();
                    methods.extend(service.method.into_iter().filter_map(|m| m.name));
                }
            }
        }
        KnownMethods { services }
    }

    /// The gateway's own set: this workspace's services, gRPC health and
    /// server reflection (v1 and v1alpha).
    pub fn gateway() -> Arc<KnownMethods> {
        static KNOWN: OnceLock<Arc<KnownMethods>> = OnceLock::new();
        KNOWN
            .get_or_init(|| {
                Arc::new(KnownMethods::from_descriptor_sets(&[
                    proto::FILE_DESCRIPTOR_SET,
                    tonic_health::pb::FILE_DESCRIPTOR_SET,
                    tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
                    tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
                ]))
            })
            .clone()
    }

    /// The (service, method) labels of a request path: the path's own
    /// names when both are known, (service, `unknown`) for a known
    /// service's unknown method, (`unknown`, `unknown`) otherwise.
    pub fn labels<'a>(&'a self, path: &str) -> (&'a str, &'a str) {
        let Some((service, method)) = path.strip_prefix('/').and_then(|p| p.split_once('/')) else {
            return (UNKNOWN, UNKNOWN);
        };
        match self.services.get_key_value(service) {
            None => (UNKNOWN, UNKNOWN),
            Some((service, methods)) => match methods.get(method) {
                Some(method) => (service.as_str(), method.as_str()),
                None => (service.as_str(), UNKNOWN),
            },
        }
    }
}

/// The per-call collectors. Cheap to clone.
#[derive(Clone)]
pub struct GrpcMetrics {
    /// Call durations.
    pub handling: HistogramVec,
    /// Calls finished.
    pub handled: IntCounterVec,
    /// The label values a call may be counted under.
    pub known: Arc<KnownMethods>,
}

/// The layer: wraps a server's routes (`Server::layer`).
#[derive(Clone)]
pub struct RpcMetricsLayer {
    metrics: GrpcMetrics,
}

impl RpcMetricsLayer {
    /// Records into `metrics` (a gateway's: [`crate::metrics::Metrics::grpc`]).
    pub fn new(metrics: &GrpcMetrics) -> Self {
        RpcMetricsLayer {
            metrics: metrics.clone(),
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
        let (service, method) = self.metrics.known.labels(&self.path);
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
    fn only_known_services_and_methods_become_labels() {
        let known = KnownMethods::gateway();
        assert_eq!(
            known.labels("/openshell.pool_admin.v1.PoolAdmin/GetSupervisorPoolStatus"),
            (
                "openshell.pool_admin.v1.PoolAdmin",
                "GetSupervisorPoolStatus"
            )
        );
        assert_eq!(
            known.labels("/grpc.health.v1.Health/Check"),
            ("grpc.health.v1.Health", "Check")
        );
        assert_eq!(
            known.labels("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            (
                "grpc.reflection.v1.ServerReflection",
                "ServerReflectionInfo"
            )
        );
        assert_eq!(
            known
                .labels("/openshell.raft.v1.RaftTransport/AppendEntries")
                .1,
            "AppendEntries"
        );
        assert_eq!(
            known.labels("/openshell.pool_admin.v1.PoolAdmin/NoSuchMethod1"),
            ("openshell.pool_admin.v1.PoolAdmin", UNKNOWN)
        );
        for path in ["/a.B/C", "/a.B/c/d", "/a.B/c\u{e9}", "nope", "/", ""] {
            assert_eq!(known.labels(path), (UNKNOWN, UNKNOWN), "{path:?}");
        }
    }

    #[test]
    fn a_call_is_recorded_once_with_its_code() {
        let metrics = crate::metrics::Metrics::new();
        let mut call = Call {
            path: "/openshell.objects.v1.ObjectStore/Get".into(),
            started: Instant::now(),
            metrics: metrics.grpc.clone(),
            done: false,
        };
        call.finish(5);
        drop(call);
        let handled = &metrics.grpc.handled;
        let labels = |code| ["openshell.objects.v1.ObjectStore", "Get", code];
        assert_eq!(handled.with_label_values(&labels("NotFound")).get(), 1);
        assert_eq!(handled.with_label_values(&labels("Canceled")).get(), 0);
    }
}
