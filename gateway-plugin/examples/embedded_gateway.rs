//! A host that mounts a gateway's services in its own tonic server, next to
//! a gRPC service of its own (`host.v1.Greeter/Hello`), on one port.
//!
//! ```text
//! cargo run -p gateway-plugin --example embedded_gateway -- [--data-dir DIR] [--listen ADDR] [--smoke]
//! ```
//!
//! It starts a one-node `--insecure` cluster (plaintext, no tokens: a
//! development set-up; see `gateway_plugin::embed` for TLS and the peer
//! port), waits until the gateway is ready, then serves until Ctrl-C. With
//! `--smoke` (what CI runs) it instead makes one call to each side — the
//! host's own service and the gateway's object store, through the same
//! port — prints them, and stops the gateway within its bound.
//!
//! `gateway-plugin/tests/t111_embedded.rs` runs this file's [`run`]
//! in-process and the built example as a process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use gateway_plugin::config::{GatewayConfig, GatewaySection, ValidateGateway};
use gateway_plugin::config_driver::SandboxDriverSection;
use gateway_plugin::embed::Gateway;

/// The host's own service: `host.v1.Greeter/Hello` takes and returns
/// `google.protobuf.Empty` (prost's `()`), written by hand with tonic's
/// server primitives (a real host would generate it from its `.proto`).
pub mod greeter {
    use std::convert::Infallible;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// The service's name.
    pub const NAME: &str = "host.v1.Greeter";
    /// The one method's path.
    pub const HELLO: &str = "/host.v1.Greeter/Hello";

    /// The service: answers every Hello.
    #[derive(Clone, Default)]
    pub struct Greeter;

    impl tonic::server::NamedService for Greeter {
        const NAME: &'static str = NAME;
    }

    struct Hello;

    impl tonic::server::UnaryService<()> for Hello {
        type Response = ();
        type Future =
            Pin<Box<dyn Future<Output = Result<tonic::Response<()>, tonic::Status>> + Send>>;

        fn call(&mut self, _request: tonic::Request<()>) -> Self::Future {
            Box::pin(async { Ok(tonic::Response::new(())) })
        }
    }

    impl tower::Service<http::Request<tonic::body::Body>> for Greeter {
        type Response = http::Response<tonic::body::Body>;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
            Box::pin(async move {
                if request.uri().path() != HELLO {
                    return Ok(
                        tonic::Status::unimplemented(request.uri().path().to_string()).into_http(),
                    );
                }
                let mut grpc =
                    tonic::server::Grpc::new(tonic_prost::ProstCodec::<(), ()>::default());
                Ok(grpc.unary(Hello, request).await)
            })
        }
    }

    /// Calls Hello on `channel`.
    ///
    /// # Errors
    /// The call's status.
    pub async fn hello(channel: tonic::transport::Channel) -> Result<(), tonic::Status> {
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let path = http::uri::PathAndQuery::from_static(HELLO);
        grpc.unary(
            tonic::Request::new(()),
            path,
            tonic_prost::ProstCodec::<(), ()>::default(),
        )
        .await
        .map(|_| ())
    }
}

/// What the example does.
#[derive(Clone, Debug)]
pub struct Options {
    /// The gateway's data directory.
    pub data_dir: PathBuf,
    /// Where the host listens (`127.0.0.1:0`: a free port).
    pub listen: SocketAddr,
    /// Call both services once, then stop (instead of serving until Ctrl-C).
    pub smoke: bool,
}

/// What a smoke run saw.
#[derive(Debug)]
pub struct Smoke {
    /// The port both services were served on.
    pub addr: SocketAddr,
    /// The resource version of the object put through the gateway's
    /// ObjectStore.
    pub resource_version: u64,
    /// The payload read back.
    pub payload: Vec<u8>,
}

/// A one-node insecure cluster whose raft address is the host's port.
///
/// # Errors
/// The configuration does not validate.
pub fn config(options: &Options, addr: SocketAddr) -> anyhow::Result<GatewayConfig> {
    let section = GatewaySection {
        node_id: Some(1),
        listen_addr: Some(addr.to_string()),
        data_dir: Some(options.data_dir.clone()),
        initial_voters: Some(vec![format!("1={addr}")]),
        insecure: Some(true),
        sandbox_driver: Some(SandboxDriverSection {
            kind: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    section
        .validate()
        .context("the embedded gateway's configuration")
}

/// Runs the host: binds, starts the gateway, serves both services on one
/// port; returns what a smoke run saw (`None` when it served until Ctrl-C).
///
/// # Errors
/// Binding, starting or serving failed, or a smoke call failed.
pub async fn run(options: Options) -> anyhow::Result<Option<Smoke>> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("binding {}", options.listen))?;
    let addr = listener.local_addr()?;
    let gateway = Gateway::start(config(&options, addr)?).await?;
    let routes = gateway.single_port_routes()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        gateway
            .server_builder()
            .add_routes(routes)
            .add_service(greeter::Greeter)
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                async {
                    let _ = stop_rx.await;
                },
            ),
    );
    println!("embedded gateway and host.v1.Greeter on {addr}");
    wait_ready(&gateway).await?;
    let smoke = if options.smoke {
        Some(smoke(addr).await?)
    } else {
        let _ = tokio::signal::ctrl_c().await;
        None
    };
    let drained = gateway
        .stop(async move {
            let _ = stop_tx.send(());
            server.await
        })
        .await;
    match drained {
        Some(Ok(served)) => served.context("the host's server")?,
        Some(Err(e)) => anyhow::bail!("the host's server task: {e}"),
        None => anyhow::bail!("the host's server did not drain within the stop bound"),
    }
    Ok(smoke)
}

/// Waits up to 30 s for the gateway to be ready.
async fn wait_ready(gateway: &Gateway) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let verdict = gateway.health().verdict();
        if verdict.ready {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("not ready within 30 s: {}", verdict.reason);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One call to each side through the host's port.
async fn smoke(addr: SocketAddr) -> anyhow::Result<Smoke> {
    use proto::objects::object_store_client::ObjectStoreClient;
    use proto::objects::{precondition, GetRequest, Object, Precondition, PutRequest};
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await
        .context("connecting to the host")?;
    greeter::hello(channel.clone())
        .await
        .context("host.v1.Greeter/Hello")?;
    let mut store = ObjectStoreClient::new(channel);
    let object = Object {
        id: "embedded".into(),
        r#type: "example".into(),
        scope: "host".into(),
        payload: b"hello from the host".to_vec(),
        ..Default::default()
    };
    let put = store
        .put(PutRequest {
            object: Some(object),
            precondition: Some(Precondition {
                kind: Some(precondition::Kind::Unconditional(true)),
            }),
            ..Default::default()
        })
        .await
        .context("ObjectStore/Put")?
        .into_inner();
    let resource_version = put.object.map(|o| o.resource_version).unwrap_or_default();
    let got = store
        .get(GetRequest {
            r#type: "example".into(),
            id: "embedded".into(),
            ..Default::default()
        })
        .await
        .context("ObjectStore/Get")?
        .into_inner();
    let payload = got.object.map(|o| o.payload).unwrap_or_default();
    println!(
        "Greeter/Hello answered; ObjectStore/Put wrote resource version {resource_version}; Get read {:?}",
        String::from_utf8_lossy(&payload)
    );
    Ok(Smoke {
        addr,
        resource_version,
        payload,
    })
}

/// `--data-dir DIR`, `--listen ADDR`, `--smoke`.
fn options() -> anyhow::Result<(Options, Option<tempfile::TempDir>)> {
    let mut data_dir = None;
    let mut listen: SocketAddr = "127.0.0.1:0".parse()?;
    let mut smoke = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--data-dir" => data_dir = Some(PathBuf::from(args.next().context("--data-dir DIR")?)),
            "--listen" => {
                listen = args
                    .next()
                    .context("--listen ADDR")?
                    .parse()
                    .context("--listen: not an ip:port")?
            }
            "--smoke" => smoke = true,
            other => {
                anyhow::bail!("unknown argument {other:?}: expected --data-dir, --listen, --smoke")
            }
        }
    }
    let (data_dir, temp) = match data_dir {
        Some(dir) => (dir, None),
        None => {
            let temp = tempfile::tempdir()?;
            (temp.path().join("gateway"), Some(temp))
        }
    };
    Ok((
        Options {
            data_dir,
            listen,
            smoke,
        },
        temp,
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (options, _temp) = options()?;
    run(options).await?;
    Ok(())
}
