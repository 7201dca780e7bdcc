//! TLS through real sockets on loopback: handshakes, refusals, reload.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tower::ServiceExt;

use super::generate::{Ca, Usage};
use super::*;

fn names() -> Vec<String> {
    vec!["127.0.0.1".into(), "localhost".into()]
}

/// Serves `tls` on a loopback port: each connection echoes one line back.
async fn echo_server(tls: ServerTls) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        let mut conns = std::pin::pin!(incoming(listener, tls));
        while let Some(Ok(mut stream)) = conns.next().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// Dials `addr` with `tls`, sends "ping" and returns what came back and the
/// server certificate it saw.
async fn ping(tls: &ClientTls, addr: &str) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let uri: tonic::codegen::http::Uri = format!("http://{addr}").parse().expect("uri");
    let io = tls.connector().oneshot(uri).await?;
    let mut stream = io.into_inner();
    stream.write_all(b"ping").await?;
    let mut buf = [0u8; 4];
    stream.read_exact(&mut buf).await?;
    let served = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first().map(|c| c.as_ref().to_vec()))
        .unwrap_or_default();
    Ok((buf.to_vec(), served))
}

fn pem_der(path: &Path) -> Vec<u8> {
    let text = std::fs::read(path).expect("read");
    read_certs(path, &text).expect("certs")[0].as_ref().to_vec()
}

#[tokio::test]
async fn a_client_trusting_the_ca_talks_and_others_are_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::create(dir.path(), "test ca").expect("ca");
    let server = ca
        .issue(dir.path(), "server", &names(), Usage::Server)
        .expect("server");
    let tls = ServerTls::load(&server.cert, &server.key, ClientAuth::None).expect("load");
    let addr = echo_server(tls).await;
    let client = ClientTls::load(&ca.cert, None).expect("client");
    let (echo, _) = ping(&client, &addr).await.expect("ping");
    assert_eq!(echo, b"ping");

    // A client trusting another CA refuses the server.
    let other = tempfile::tempdir().expect("dir");
    let other_ca = Ca::create(other.path(), "other ca").expect("ca");
    let stranger = ClientTls::load(&other_ca.cert, None).expect("client");
    let e = ping(&stranger, &addr)
        .await
        .expect_err("unknown CA must fail");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");

    // A plaintext client gets nothing back.
    let mut plain = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    plain
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .expect("write");
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "a plaintext client must be disconnected");
    assert!(!buf.windows(4).any(|w| w == b"ping"));
}

#[tokio::test]
async fn a_required_client_certificate_is_required() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::create(dir.path(), "test ca").expect("ca");
    let node = ca
        .issue(dir.path(), "node", &names(), Usage::ServerAndClient)
        .expect("node");
    let tls = ServerTls::load(&node.cert, &node.key, ClientAuth::Required(ca.cert.clone()))
        .expect("load");
    let addr = echo_server(tls).await;
    let with_cert = ClientTls::load(&ca.cert, Some((&node.cert, &node.key))).expect("client");
    assert_eq!(ping(&with_cert, &addr).await.expect("ping").0, b"ping");
    // TLS 1.3: the server's refusal arrives after the client's handshake
    // completes, at the first read.
    let without = ClientTls::load(&ca.cert, None).expect("client");
    assert!(ping(&without, &addr).await.is_err());
    // A certificate of another CA is refused too.
    let other = tempfile::tempdir().expect("dir");
    let other_ca = Ca::create(other.path(), "other ca").expect("ca");
    let foreign = other_ca
        .issue(other.path(), "foreign", &names(), Usage::Client)
        .expect("foreign");
    let foreign = ClientTls::load(&ca.cert, Some((&foreign.cert, &foreign.key))).expect("client");
    assert!(ping(&foreign, &addr).await.is_err());
}

#[tokio::test]
async fn changed_files_are_served_to_new_connections_and_old_ones_stay() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::create(dir.path(), "test ca").expect("ca");
    // Kubernetes' layout: tls.crt -> ..data/tls.crt, ..data -> a dated dir.
    let first = dir.path().join("v1");
    let second = dir.path().join("v2");
    std::fs::create_dir_all(&first).expect("mkdir");
    std::fs::create_dir_all(&second).expect("mkdir");
    let one = ca
        .issue(&first, "tls", &names(), Usage::Server)
        .expect("v1");
    let two = ca
        .issue(&second, "tls", &names(), Usage::Server)
        .expect("v2");
    let mounted = dir.path().join("mounted");
    std::fs::create_dir_all(&mounted).expect("mkdir");
    std::os::unix::fs::symlink(&first, mounted.join("..data")).expect("link");
    for f in ["tls.crt", "tls.key"] {
        std::os::unix::fs::symlink(format!("..data/{f}"), mounted.join(f)).expect("link");
    }
    let tls = ServerTls::load(
        &mounted.join("tls.crt"),
        &mounted.join("tls.key"),
        ClientAuth::None,
    )
    .expect("load");
    let addr = echo_server(tls.clone()).await;
    let client = ClientTls::load(&ca.cert, None).expect("client");
    // An established connection.
    let uri: tonic::codegen::http::Uri = format!("http://{addr}").parse().expect("uri");
    let mut held = client
        .connector()
        .oneshot(uri)
        .await
        .expect("connect")
        .into_inner();
    assert_eq!(
        ping(&client, &addr).await.expect("ping").1,
        pem_der(&one.cert)
    );
    assert!(!tls.reload().expect("unchanged"));

    // The atomic swap of ..data.
    let tmp = mounted.join("..data_tmp");
    std::os::unix::fs::symlink(&second, &tmp).expect("link");
    std::fs::rename(&tmp, mounted.join("..data")).expect("swap");
    assert!(tls.reload().expect("changed"));
    assert_eq!(
        ping(&client, &addr).await.expect("ping").1,
        pem_der(&two.cert)
    );
    held.write_all(b"held").await.expect("write");
    let mut buf = [0u8; 4];
    held.read_exact(&mut buf)
        .await
        .expect("the old connection stays up");
    assert_eq!(&buf, b"held");

    // A broken update is refused, naming the file; the last good one stays.
    std::fs::write(second.join("tls.key"), "not a key").expect("write");
    let e = tls.reload().expect_err("a bad key is refused");
    assert!(e.to_string().contains("tls.key"), "{e}");
    assert_eq!(
        ping(&client, &addr).await.expect("ping").1,
        pem_der(&two.cert)
    );
}

#[test]
fn expired_mismatched_and_missing_files_are_named() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::create(dir.path(), "test ca").expect("ca");
    let old = ca
        .issue_valid(
            dir.path(),
            "old",
            &names(),
            Usage::Server,
            Some(((2020, 1, 1), (2021, 1, 1))),
        )
        .expect("old");
    let e = ServerTls::load(&old.cert, &old.key, ClientAuth::None).expect_err("expired");
    let text = e.to_string();
    assert!(
        text.contains("old.crt") && text.contains("expired at"),
        "{text}"
    );

    let a = ca
        .issue(dir.path(), "a", &names(), Usage::Server)
        .expect("a");
    let b = ca
        .issue(dir.path(), "b", &names(), Usage::Server)
        .expect("b");
    let e = ServerTls::load(&a.cert, &b.key, ClientAuth::None).expect_err("mismatch");
    assert!(e.to_string().contains("a.crt"), "{e}");

    let missing = dir.path().join("missing.crt");
    let e = ClientTls::load(&missing, None).expect_err("missing");
    assert!(e.to_string().contains("missing.crt"), "{e}");
    let e = ClientTls::load(&a.key, None).expect_err("a key is not a CA");
    assert!(e.to_string().contains("a.key"), "{e}");
}

#[tokio::test]
async fn in_memory_material_serves_and_verifies_and_never_reloads() {
    let ca = Ca::ephemeral("runtime ca").expect("ca");
    assert!(
        ca.cert.as_os_str().is_empty(),
        "an ephemeral CA has no file"
    );
    let server = ca
        .issue_pem("runtime", &names(), Usage::Server)
        .expect("server");
    assert!(server.cert.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(!format!("{server:?}").contains("PRIVATE KEY"));
    let tls = ServerTls::from_pem(&server.cert, &server.key).expect("from_pem");
    assert!(!tls.reload().expect("reload"));
    let addr = echo_server(tls).await;
    let client = ClientTls::from_ca_pem(ca.cert_pem()).expect("client");
    assert!(!client.reload().expect("reload"));
    assert_eq!(ping(&client, &addr).await.expect("ping").0, b"ping");

    let other = Ca::ephemeral("other ca").expect("ca");
    let stranger = ClientTls::from_ca_pem(other.cert_pem()).expect("client");
    assert!(ping(&stranger, &addr).await.is_err());

    // Bad PEM is refused, naming the in-memory source.
    let e = ServerTls::from_pem("nope", &server.key).expect_err("bad cert");
    assert!(e.to_string().contains("in-memory"), "{e}");
    assert!(ClientTls::from_ca_pem("nope").is_err());
    // A file CA and its in-memory PEM agree.
    let dir = tempfile::tempdir().expect("dir");
    let filed = Ca::create(dir.path(), "filed").expect("ca");
    assert_eq!(
        std::fs::read_to_string(&filed.cert).expect("read"),
        filed.cert_pem()
    );
    let loaded = Ca::load(dir.path()).expect("load");
    assert_eq!(loaded.cert_pem(), filed.cert_pem());
}

/// An idle TCP connection from `source` (a loopback address) to `addr`.
async fn idle_from(source: &str, addr: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(format!("{source}:0").parse().expect("source"))
        .expect("bind source");
    socket
        .connect(addr.parse().expect("addr"))
        .await
        .expect("connect")
}

#[tokio::test]
async fn one_address_holds_at_most_its_share_and_silence_is_cut_short() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::create(dir.path(), "test ca").expect("ca");
    let server = ca
        .issue(dir.path(), "server", &names(), Usage::Server)
        .expect("server");
    let tls = ServerTls::load(&server.cert, &server.key, ClientAuth::None).expect("load");
    let addr = echo_server(tls).await;
    let client = ClientTls::load(&ca.cert, None).expect("client");

    // 200 silent connections from 127.0.0.2: 128 wait for their first
    // byte, the others are refused; none holds a handshake slot.
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(idle_from("127.0.0.2", &addr).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let (echo, _) = ping(&client, &addr)
        .await
        .expect("another address is served");
    assert_eq!(echo, b"ping");
    assert!(started.elapsed() < Duration::from_secs(1));

    // From 127.0.0.2 itself, a new connection is refused with the alert
    // while its 128 silent ones are pending.
    let refused = {
        let stream = idle_from("127.0.0.2", &addr).await;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
        tokio_rustls::TlsConnector::from(client.current())
            .connect(name, stream)
            .await
            .expect_err("over the per-address limit")
    };
    let cause = refused
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .unwrap_or_else(|| panic!("not a rustls error: {refused}"));
    assert!(refused_for_limit(cause), "{cause:?}");

    // The pending ones are closed after the first-byte timeout.
    let mut first = idle.swap_remove(0);
    let mut buf = [0u8; 8];
    let read = tokio::time::timeout(FIRST_BYTE_TIMEOUT * 2, first.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "a silent connection was kept: {read:?}"
    );
}

#[tokio::test]
async fn a_handshake_that_gets_no_answer_times_out_by_name() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let _held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::create(dir.path(), "test ca").expect("ca");
    let client = ClientTls::load(&ca.cert, None).expect("client");
    let uri: tonic::codegen::http::Uri = format!("http://{addr}").parse().expect("uri");
    let e = client
        .connector()
        .with_timeout(Duration::from_millis(300))
        .oneshot(uri)
        .await
        .expect_err("nobody answers");
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    let timed_out = e
        .get_ref()
        .and_then(|e| e.downcast_ref::<HandshakeTimedOut>())
        .unwrap_or_else(|| panic!("not a handshake timeout: {e}"));
    assert_eq!(timed_out.after, Duration::from_millis(300));
}

#[tokio::test]
async fn a_burst_from_one_address_waits_for_its_slots_and_is_served() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::create(dir.path(), "test ca").expect("ca");
    let server = ca
        .issue(dir.path(), "server", &names(), Usage::Server)
        .expect("server");
    let tls = ServerTls::load(&server.cert, &server.key, ClientAuth::None).expect("load");
    let addr = echo_server(tls).await;
    let client = ClientTls::load(&ca.cert, None).expect("client");
    let burst = 4 * MAX_HANDSHAKES_PER_ADDRESS;
    let calls: Vec<_> = (0..burst)
        .map(|_| {
            let (client, addr) = (client.clone(), addr.clone());
            tokio::spawn(async move { ping(&client, &addr).await.map(|(echo, _)| echo) })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.expect("task").expect("served"), b"ping");
    }
}
