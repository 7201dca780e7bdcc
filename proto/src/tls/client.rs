//! The dialling side: [`ClientTls`] (the CA a server must chain to, an
//! optional client certificate, and an optional server name to verify in
//! place of the dialled host) and [`TlsConnector`], the connector
//! `proto::client::connect` gives tonic.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tonic::codegen::http::Uri;

use super::server::describe;
use super::{alpn, provider, read_certs, read_key, read_roots, Build, Reload, TlsError, Watched};

/// What a dialling side trusts and presents, re-read when its files change.
/// Cloning shares it; two clones compare equal.
#[derive(Clone)]
pub struct ClientTls {
    inner: Arc<Watched<rustls::ClientConfig>>,
    /// The name the server's certificate must carry, whatever host is
    /// dialled; `None` verifies the dialled host.
    server_name: Option<Arc<str>>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("files", &self.inner.files())
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl PartialEq for ClientTls {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner) && self.server_name == other.server_name
    }
}

impl Eq for ClientTls {}

impl ClientTls {
    /// Trusts servers whose certificate chains to the CA file `ca`; presents
    /// `identity` (certificate chain file, key file) when given.
    ///
    /// # Errors
    /// A file that cannot be read or used, named in the error.
    pub fn load(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<Self, TlsError> {
        let (files, build): (Vec<PathBuf>, Build<rustls::ClientConfig>) = match identity {
            None => (vec![ca.to_path_buf()], build_anonymous),
            Some((cert, key)) => (
                vec![ca.to_path_buf(), cert.to_path_buf(), key.to_path_buf()],
                build_identified,
            ),
        };
        Ok(ClientTls {
            inner: Arc::new(Watched::load(files, build)?),
            server_name: None,
        })
    }

    /// Whether it presents a client certificate (loaded with an identity).
    pub fn presents_certificate(&self) -> bool {
        self.inner.files().len() > 1
    }

    /// Trusts servers whose certificate chains to the in-memory PEM CA
    /// `ca_pem`; presents no certificate. Nothing is read from disk, so
    /// [`Reload::reload`] never changes it.
    ///
    /// # Errors
    /// The PEM holds no usable CA certificate.
    pub fn from_ca_pem(ca_pem: &str) -> Result<Self, TlsError> {
        Ok(ClientTls {
            inner: Arc::new(Watched::fixed(
                &["<in-memory CA>"],
                vec![ca_pem.as_bytes().to_vec()],
                build_anonymous,
            )?),
            server_name: None,
        })
    }

    /// Verifies the server's certificate for the DNS name `name` instead of
    /// the dialled host: a supervisor dials a sandbox runtime at its IP and
    /// verifies the runtime's name, which its certificate carries.
    #[must_use]
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(Arc::from(name.into()));
        self
    }

    /// The name verified in place of the dialled host, if any.
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// The configuration new connections use.
    pub fn current(&self) -> Arc<rustls::ClientConfig> {
        self.inner.current()
    }

    /// A connector dialling TCP, then TLS with the current configuration,
    /// verifying the server's certificate for the URI's host, or for the
    /// [server name](ClientTls::with_server_name) when one is set.
    pub fn connector(&self) -> TlsConnector {
        TlsConnector {
            tls: self.clone(),
            timeout: None,
            local: None,
        }
    }
}

impl Reload for ClientTls {
    fn reload(&self) -> Result<bool, TlsError> {
        self.inner.reload()
    }

    fn describe(&self) -> String {
        describe(self.inner.files())
    }
}

fn builder(
    path: &Path,
    contents: &[u8],
) -> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>, TlsError>
{
    let roots = read_roots(path, contents)?;
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(super::VERSIONS)
        .map_err(|source| TlsError::Rustls {
            path: path.to_path_buf(),
            source,
        })?
        .with_root_certificates(roots))
}

fn build_anonymous(
    files: &[PathBuf],
    contents: &[Vec<u8>],
) -> Result<rustls::ClientConfig, TlsError> {
    let mut config = builder(&files[0], &contents[0])?.with_no_client_auth();
    config.alpn_protocols = alpn();
    Ok(config)
}

fn build_identified(
    files: &[PathBuf],
    contents: &[Vec<u8>],
) -> Result<rustls::ClientConfig, TlsError> {
    let certs = read_certs(&files[1], &contents[1])?;
    let key = read_key(&files[2], &contents[2])?;
    let mut config = builder(&files[0], &contents[0])?
        .with_client_auth_cert(certs, key)
        .map_err(|source| TlsError::Rustls {
            path: files[1].clone(),
            source,
        })?;
    config.alpn_protocols = alpn();
    Ok(config)
}

/// Dials `host:port` from the URI, then TLS, verifying the server's
/// certificate names `host` (a DNS name or an IP address), or the client's
/// server name when it has one.
#[derive(Clone, Debug)]
pub struct TlsConnector {
    tls: ClientTls,
    /// Bounds the TCP connect and, apart, the handshake (`None`: the
    /// caller's own deadline only).
    timeout: Option<Duration>,
    /// The local address connections are made from (`None`: the system's
    /// choice).
    local: Option<std::net::IpAddr>,
}

impl TlsConnector {
    /// The same connector, connecting from the local address `local`
    /// (`None`: the system chooses).
    pub fn with_local_address(mut self, local: Option<std::net::IpAddr>) -> Self {
        self.local = local;
        self
    }

    /// The same connector, the TCP connect and the TLS handshake each
    /// bounded by `timeout`: a handshake that does not complete in time
    /// fails with an I/O error of kind `TimedOut` carrying
    /// [`HandshakeTimedOut`], so a caller can say the server was reached
    /// but did not answer.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// A TLS handshake that did not complete in time: the server accepted the
/// TCP connection but did not answer the ClientHello (stopped, overloaded,
/// or its handshake slots full).
#[derive(Debug, thiserror::Error)]
#[error(
    "TLS handshake with {addr} timed out after {} ms: the connection was accepted but the handshake \
     got no answer",
    after.as_millis()
)]
pub struct HandshakeTimedOut {
    /// `host:port` dialled.
    pub addr: String,
    /// The bound that passed.
    pub after: Duration,
}

impl tower::Service<Uri> for TlsConnector {
    type Response = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let config = self.tls.current();
        let server_name = self.tls.server_name.clone();
        let timeout = self.timeout;
        let local = self.local;
        Box::pin(async move {
            let invalid = |what: &str| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{uri}: {what}"))
            };
            let host = uri.host().ok_or_else(|| invalid("no host"))?;
            let port = uri.port_u16().ok_or_else(|| invalid("no port"))?;
            // An IPv6 literal comes bracketed in a URI.
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            let verified = server_name.as_deref().unwrap_or(bare);
            let name = ServerName::try_from(verified.to_string()).map_err(|e| {
                invalid(&format!(
                    "{verified:?} is not a DNS name or IP address: {e}"
                ))
            })?;
            let dial = crate::client::dial_tcp(bare, port, local);
            let tcp = match timeout {
                Some(t) => tokio::time::timeout(t, dial).await.map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "connecting to {bare}:{port} timed out after {} ms",
                            t.as_millis()
                        ),
                    )
                })??,
                None => dial.await?,
            };
            tcp.set_nodelay(true)?;
            let handshake = tokio_rustls::TlsConnector::from(config).connect(name, tcp);
            let tls = match timeout {
                Some(after) => tokio::time::timeout(after, handshake).await.map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        HandshakeTimedOut {
                            addr: format!("{bare}:{port}"),
                            after,
                        },
                    )
                })??,
                None => handshake.await?,
            };
            Ok(TokioIo::new(tls))
        })
    }
}

impl ClientTls {
    /// A TLS connection to `addr` (`host:port`), verified as every call's
    /// is: for raw protocol work (tests, probes) below gRPC.
    ///
    /// # Errors
    /// The address, the connection or the verification failed.
    pub async fn connect(
        &self,
        addr: &str,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        use tower::ServiceExt;
        let uri: Uri = format!("http://{addr}").parse().map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{addr}: {e}"))
        })?;
        Ok(self.connector().oneshot(uri).await?.into_inner())
    }

    /// The end-entity certificate (DER) the server at `addr` (`host:port`)
    /// presents to a new connection, after verifying it as every call does.
    /// For operators and tests: which certificate does a port serve now?
    ///
    /// # Errors
    /// The connection or the verification failed.
    pub async fn served_certificate(&self, addr: &str) -> std::io::Result<Vec<u8>> {
        let stream = self.connect(addr).await?;
        Ok(stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first().map(|c| c.as_ref().to_vec()))
            .unwrap_or_default())
    }
}

#[cfg(all(test, feature = "generate"))]
mod tests {
    use futures::StreamExt;
    use tokio::net::TcpListener;

    use super::super::generate::{Ca, Usage};
    use super::super::{incoming, ServerTls};
    use super::ClientTls;

    /// Serves a certificate for the DNS name `runtime-a` only (no IP) on
    /// 127.0.0.1, accepting connections until the test ends.
    async fn serve_named() -> (Ca, String) {
        let ca = Ca::ephemeral("runtime ca").expect("ca");
        let issued = ca
            .issue_pem("runtime-a", &["runtime-a".to_string()], Usage::Server)
            .expect("issue");
        let tls = ServerTls::from_pem(&issued.cert, &issued.key).expect("server tls");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            let mut conns = std::pin::pin!(incoming(listener, tls));
            // Hold each connection open until the client goes.
            let mut held = Vec::new();
            while let Some(Ok(stream)) = conns.next().await {
                held.push(stream);
            }
        });
        (ca, addr)
    }

    #[tokio::test]
    async fn a_server_name_is_verified_in_place_of_the_dialled_ip() {
        let (ca, addr) = serve_named().await;
        let by_ip = ClientTls::from_ca_pem(ca.cert_pem()).expect("client");
        let e = by_ip
            .connect(&addr)
            .await
            .expect_err("the certificate does not name 127.0.0.1");
        assert!(e.to_string().contains("not valid for name"), "{e}");

        let named = by_ip.clone().with_server_name("runtime-a");
        assert_eq!(named.server_name(), Some("runtime-a"));
        assert_ne!(named, by_ip, "a server name makes another client");
        named
            .connect(&addr)
            .await
            .expect("verified for runtime-a, dialled by IP");

        let wrong = ClientTls::from_ca_pem(ca.cert_pem())
            .expect("client")
            .with_server_name("runtime-b");
        let e = wrong.connect(&addr).await.expect_err("wrong name");
        assert!(e.to_string().contains("not valid for name"), "{e}");

        let invalid = ClientTls::from_ca_pem(ca.cert_pem())
            .expect("client")
            .with_server_name("not a name!");
        let e = invalid.connect(&addr).await.expect_err("not a DNS name");
        assert!(e.to_string().contains("not a DNS name"), "{e}");
    }
}
