//! One address reconnecting in a loop gets its handshakes at a bounded
//! rate; other addresses and the operator are not slowed (issue 31 §3:
//! "TLS handshakes are bounded but not rate-limited per client address").
//!
//! - given: one secure gateway (TLS, tokens)
//! - when: 600 complete TLS handshakes from 127.0.0.3, 16 at a time
//! - then: they all succeed (over the rate a handshake waits, it is not
//!   refused) and take at least (600 - burst 200) / 100 per second = 4 s
//!   less a margin; without the limit they take about a second here
//! - and: meanwhile `raft status` from 127.0.0.1 works, and right after,
//!   100 handshakes from 127.0.0.4 (its own bucket, within the burst) take
//!   less than half the flood's time

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cli::*;
use common::*;
use proto::tls::ClientTls;

/// One complete TLS handshake from `source` (a loopback address) to `addr`.
async fn handshake_from(tls: &ClientTls, source: &str, addr: &str) -> TestResult {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{source}:0").parse()?)?;
    let tcp = socket.connect(addr.parse()?).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?.to_owned();
    let stream = tokio_rustls::TlsConnector::from(tls.current())
        .connect(name, tcp)
        .await?;
    drop(stream);
    Ok(())
}

/// `total` handshakes from `source`, `parallel` at a time; how long they
/// took.
async fn handshakes(
    tls: &Arc<ClientTls>,
    source: &'static str,
    addr: &str,
    total: usize,
    parallel: usize,
) -> TestResult<Duration> {
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..parallel {
        let (tls, addr) = (tls.clone(), addr.to_string());
        let share = total / parallel + usize::from(w < total % parallel);
        workers.push(tokio::spawn(async move {
            for _ in 0..share {
                handshake_from(&tls, source, &addr)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(())
        }));
    }
    for w in workers {
        w.await??;
    }
    Ok(started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_gets_its_handshakes_at_a_bounded_rate() -> TestResult {
    let cluster = Cluster::start_secure(1, &[]);
    cluster.wait_leader("secure gateway up").await;
    let material = cluster.material.as_ref().ok_or("material")?;
    let tls = Arc::new(material.client().tls);
    let secure = material_security(material);
    let addr = cluster.get(1).addr.clone();
    let rate = u64::from(proto::tls::HANDSHAKE_RATE_PER_ADDRESS.get());
    let burst = u64::from(proto::tls::HANDSHAKE_BURST_PER_ADDRESS.get());

    eprintln!("--- step: 600 handshakes from 127.0.0.3, 16 at a time; raft status meanwhile");
    let flood = {
        let (tls, addr) = (tls.clone(), addr.clone());
        tokio::spawn(async move {
            handshakes(&tls, "127.0.0.3", &addr, 600, 16)
                .await
                .map_err(|e| e.to_string())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (code, out, err) = pool_as(&secure, &addr, &["raft", "status"]);
    assert_eq!(code, 0, "the operator is not slowed: {out} {err}");
    let took = flood.await??;
    let floor = Duration::from_millis((600 - burst) * 1000 / rate);
    println!("600 handshakes from one address: {took:?} (rate floor {floor:?})");
    assert!(
        took >= floor.mul_f64(0.8),
        "600 handshakes from one address took {took:?}, under the rate's floor {floor:?}"
    );

    eprintln!("--- step: 100 handshakes from 127.0.0.4: its own bucket");
    let other = handshakes(&tls, "127.0.0.4", &addr, 100, 16).await?;
    println!("100 handshakes from another address: {other:?}");
    assert!(
        other < took / 2,
        "another address was slowed: {other:?} against the flood's {took:?}"
    );
    Ok(())
}
