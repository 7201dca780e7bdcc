//! Idle connections cannot keep the operator out, and the CLI names why a
//! handshake failed (issue 32 item 5), through a real secure gateway and
//! the real CLI.
//!
//! Before: 200 idle TCP connections filled the port's 128 handshake slots
//! for 10 s each, and the CLI said "no gateway reachable ... start one"
//! after 0.8 s.
//!
//! - given: one secure gateway (TLS, tokens)
//! - when: 200 idle TCP connections from 127.0.0.2
//! - then: `raft status` from 127.0.0.1 works at once (a silent connection
//!   holds no handshake slot; one address has at most 128 pending, the
//!   others are refused)
//! - when: 128 idle connections from 127.0.0.1, the CLI's own address
//! - then: `raft status` exits 3 naming the per-address handshake limit,
//!   not "no gateway reachable"
//! - then: the gateway closes the idle connections after the first-byte
//!   timeout (2 s), and `raft status` works again
//! - when: the gateway is frozen (SIGSTOP: the kernel still accepts TCP)
//! - then: `raft status` exits 3 saying the handshake timed out

mod common;

use std::time::{Duration, Instant};

use common::cli::*;
use common::*;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// An idle TCP connection from `source` (a loopback address) to `addr`.
async fn idle_from(source: &str, addr: &str) -> TestResult<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{source}:0").parse()?)?;
    Ok(socket.connect(addr.parse()?).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_lock_the_operator_out_and_the_cli_names_the_cause() -> TestResult {
    let mut cluster = Cluster::start_secure(1, &[]);
    cluster.wait_leader("secure gateway up").await;
    let material = cluster.material.as_ref().ok_or("material")?;
    let secure = material_security(material);
    let addr = cluster.get(1).addr.clone();

    eprintln!("--- step: 200 idle connections from 127.0.0.2; raft status from 127.0.0.1");
    let mut flood = Vec::new();
    for _ in 0..200 {
        flood.push(idle_from("127.0.0.2", &addr).await?);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let (code, out, err) = pool_as(&secure, &addr, &["raft", "status"]);
    assert_eq!(code, 0, "{out} {err}");
    println!(
        "raft status with 200 idle connections open: {:?}",
        started.elapsed()
    );
    drop(flood);

    eprintln!("--- step: 128 idle connections from 127.0.0.1 itself");
    let mut own = Vec::new();
    for _ in 0..proto::tls::MAX_PENDING_PER_ADDRESS {
        own.push(idle_from("127.0.0.1", &addr).await?);
    }
    let (code, _, err) = pool_as(&secure, &addr, &["raft", "status"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("too many handshakes in progress from this address"),
        "{err}"
    );
    assert!(!err.contains("no gateway reachable"), "{err}");

    eprintln!("--- step: the gateway closes them after the first-byte timeout");
    let mut buf = [0u8; 8];
    let read =
        tokio::time::timeout(proto::tls::FIRST_BYTE_TIMEOUT * 2, own[0].read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "an idle connection was kept: {read:?}"
    );
    let (code, out, err) = pool_as(&secure, &addr, &["raft", "status"]);
    assert_eq!(code, 0, "{out} {err}");
    drop(own);

    eprintln!("--- step: a frozen gateway: the handshake times out, by name");
    cluster.node(1).signal("-STOP");
    let (code, _, err) = pool_as(&secure, &addr, &["raft", "status"]);
    cluster.node(1).signal("-CONT");
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("the handshake timed out after"), "{err}");
    assert!(!err.contains("no gateway reachable"), "{err}");
    Ok(())
}
