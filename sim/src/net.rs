//! The nodes' network: turmoil's simulated TCP under the real tonic, hyper
//! and h2 stack. Outbound, a [`proto::client::Dialer`] that `raft-store`'s
//! peer channels connect through; inbound, a stream of accepted
//! connections for tonic's `serve_with_incoming`. Every byte a node reads
//! from a connection is recorded in the run's [`Trace`] ([`Tapped`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use hyper_util::rt::TokioIo;
use proto::client::{Conn, Dialer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::codegen::http::Uri;
use tonic::transport::server::{Connected, TcpConnectInfo};
pub use turmoil::net::TcpListener;
use turmoil::net::TcpStream;

use crate::trace::Trace;

/// A simulated TCP connection whose received bytes go into the trace.
pub struct Tapped {
    inner: TcpStream,
    trace: Trace,
    /// `<receiver>:<port><-<sender>:<port>`, by host name.
    label: String,
}

impl Tapped {
    fn new(inner: TcpStream, trace: Trace) -> Self {
        let name = |addr: std::io::Result<std::net::SocketAddr>| match addr {
            Ok(addr) => format!(
                "{}:{}",
                turmoil::reverse_lookup(addr.ip()).unwrap_or_else(|| addr.ip().to_string()),
                addr.port()
            ),
            Err(_) => "?".to_string(),
        };
        let label = format!("{}<-{}", name(inner.local_addr()), name(inner.peer_addr()));
        Tapped {
            inner,
            trace,
            label,
        }
    }
}

impl AsyncRead for Tapped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let received = &buf.filled()[before..];
        if matches!(polled, Poll::Ready(Ok(()))) {
            let what = if received.is_empty() {
                format!("recv {} eof", self.label)
            } else {
                format!("recv {} {}B", self.label, received.len())
            };
            self.trace.record(what, received);
        }
        polled
    }
}

impl AsyncWrite for Tapped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Connected for Tapped {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        TcpConnectInfo {
            local_addr: self.inner.local_addr().ok(),
            remote_addr: self.inner.peer_addr().ok(),
        }
    }
}

/// Dials `host:port` over the simulated network (the URI's authority).
pub fn dialer(trace: Trace) -> Dialer {
    let service = tower::service_fn(move |uri: Uri| {
        let trace = trace.clone();
        async move {
            let authority = uri
                .authority()
                .ok_or_else(|| std::io::Error::other(format!("{uri} names no host:port")))?
                .to_string();
            let stream = TcpStream::connect(authority).await?;
            let conn: Box<dyn Conn> = Box::new(Tapped::new(stream, trace));
            Ok::<_, std::io::Error>(TokioIo::new(conn))
        }
    });
    Dialer::new(service)
}

/// The connections `listener` accepts on the current simulated host.
pub fn incoming(
    listener: TcpListener,
    trace: Trace,
) -> impl Stream<Item = std::io::Result<Tapped>> + Send + 'static {
    futures::stream::unfold(listener, move |listener| {
        let trace = trace.clone();
        async move {
            let accepted = listener
                .accept()
                .await
                .map(|(stream, _)| Tapped::new(stream, trace));
            Some((accepted, listener))
        }
    })
}
