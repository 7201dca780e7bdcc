//! [`incoming`]: the TLS connections of a listening port, each handshake
//! bounded, so idle or slow connections cannot keep others out.
//!
//! Per accepted connection, in order:
//! 1. at most [`MAX_PENDING`] connections are between accept and the end of
//!    their handshake on the port (more wait in the kernel's accept
//!    queue), and at most [`MAX_PENDING_PER_ADDRESS`] of them come from one
//!    peer IP address: a connection over that is refused at once with a TLS
//!    alert ([`refused_for_limit`] names it on the client's side);
//! 2. the client's first byte (its ClientHello) must arrive within
//!    [`FIRST_BYTE_TIMEOUT`]: a connection that says nothing is closed
//!    then; until it speaks it holds no handshake slot;
//! 3. it waits for its address's rate: one peer IP address starts at most
//!    [`HANDSHAKE_RATE_PER_ADDRESS`] handshakes a second, after a burst of
//!    [`HANDSHAKE_BURST_PER_ADDRESS`] (the port's
//!    [`super::HandshakeRate`]; a token bucket per address, the `governor`
//!    crate's); a connection over the rate waits for its turn;
//! 4. it waits for a handshake slot: at most [`MAX_HANDSHAKES_PER_ADDRESS`]
//!    handshakes run at once for one address (its other connections wait
//!    their turn, in order), and [`MAX_HANDSHAKES`] on the port;
//! 5. everything, accept to established, completes within
//!    [`HANDSHAKE_TIMEOUT`].
//!
//! So one address holding connections open takes at most its share of the
//! port's slots, one address reconnecting in a loop costs the port at most
//! its rate of handshakes (the CPU of a handshake is the expensive part),
//! and a burst from one address (a NAT, a test harness) waits instead of
//! being refused. Every refusal closes that connection
//! only and is logged at debug with the peer's address; the stream never
//! ends on one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::server::TlsStream;

use super::ServerTls;

/// The longest from accept to an established TLS connection before the
/// connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a new connection may stay silent before its first byte: a TLS
/// client sends its ClientHello as soon as TCP connects.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(2);

/// The most handshakes running at once on one port.
pub const MAX_HANDSHAKES: usize = 128;

/// The most handshakes running at once for one peer IP address; its other
/// connections wait their turn.
pub const MAX_HANDSHAKES_PER_ADDRESS: usize = 16;

/// The most connections between accept and established on one port; more
/// wait in the kernel's accept queue.
pub const MAX_PENDING: usize = 1024;

/// The most connections between accept and established from one peer IP
/// address; one more is refused with [`LIMIT_ALERT`].
pub const MAX_PENDING_PER_ADDRESS: usize = 128;

/// Handshakes one peer IP address may start per second, sustained, by
/// default ([`super::ServerTls::with_handshake_rate`]).
pub const HANDSHAKE_RATE_PER_ADDRESS: NonZeroU32 = NonZeroU32::new(100).expect("not zero");

/// Handshakes one peer IP address may start at once after a quiet spell,
/// before [`HANDSHAKE_RATE_PER_ADDRESS`] applies.
pub const HANDSHAKE_BURST_PER_ADDRESS: NonZeroU32 = NonZeroU32::new(200).expect("not zero");

/// Accepted connections between two sweeps of the rate limiter's
/// addresses (those whose bucket is full again are forgotten), so the
/// table holds recent addresses only.
const SWEEP_EVERY: u64 = 1024;

/// The per-address handshake rate ([`HANDSHAKE_RATE_PER_ADDRESS`]).
type RateByAddress = governor::DefaultKeyedRateLimiter<IpAddr>;

fn rate_by_address(rate: super::HandshakeRate) -> Arc<RateByAddress> {
    let quota = governor::Quota::per_second(rate.per_second).allow_burst(rate.burst);
    Arc::new(governor::RateLimiter::keyed(quota))
}

/// The alert a refused connection receives: TLS `user_canceled` (90) at
/// fatal level, in a plaintext record sent before any handshake message
/// ("canceled for some reason unrelated to a protocol failure"; rustls
/// never sends it on its own, so a client can tell this refusal apart).
const LIMIT_ALERT: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 90];

/// The most refusals being written at once (each holds its socket up to
/// [`REFUSAL_LINGER`]); beyond it a connection over the limit is just
/// closed.
const MAX_REFUSALS: usize = 256;

/// How long a refused connection is kept to read the client's bytes and
/// let it close first (so the alert is not lost to a reset).
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Whether a client's handshake error is this module's per-address refusal
/// (the server's [`LIMIT_ALERT`]).
pub fn refused_for_limit(error: &rustls::Error) -> bool {
    matches!(
        error,
        rustls::Error::AlertReceived(rustls::AlertDescription::UserCanceled)
    )
}

/// Connections from one address between accept and established, and the
/// handshake slots of that address.
struct AddressEntry {
    pending: usize,
    slots: Arc<Semaphore>,
}

/// The pending connections and handshake slots by peer address. A std
/// lock: held to change one entry, never across an await.
#[derive(Clone, Default)]
struct PerAddress(Arc<Mutex<HashMap<IpAddr, AddressEntry>>>);

/// One pending connection, counted against its address until dropped.
struct Pending {
    table: PerAddress,
    ip: IpAddr,
    /// The address's handshake slots.
    slots: Arc<Semaphore>,
}

impl PerAddress {
    /// Counts a connection from `ip`, unless it has [`MAX_PENDING_PER_ADDRESS`].
    fn enter(&self, ip: IpAddr) -> Option<Pending> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(ip).or_insert_with(|| AddressEntry {
            pending: 0,
            slots: Arc::new(Semaphore::new(MAX_HANDSHAKES_PER_ADDRESS)),
        });
        if entry.pending >= MAX_PENDING_PER_ADDRESS {
            return None;
        }
        entry.pending += 1;
        Some(Pending {
            table: self.clone(),
            ip,
            slots: entry.slots.clone(),
        })
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut map = self.table.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get_mut(&self.ip) {
            entry.pending -= 1;
            if entry.pending == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// The TLS connections of `listener`, for `serve_with_incoming`.
///
/// Each accepted connection's handshake runs in its own task, with the
/// configuration current at accept time, bounded as the module doc says.
/// A failed handshake (a plaintext client, an unknown CA, a missing client
/// certificate, silence) closes that connection and is logged at debug with
/// the peer's address; it never ends the stream. The accept loop ends when
/// the stream is dropped.
pub fn incoming(
    listener: TcpListener,
    tls: ServerTls,
) -> impl Stream<Item = Result<TlsStream<TcpStream>, std::io::Error>> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel::<TlsStream<TcpStream>>(MAX_HANDSHAKES);
    let pending = Arc::new(Semaphore::new(MAX_PENDING));
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS));
    let per_address = PerAddress::default();
    let rate = rate_by_address(tls.handshake_rate());
    let mut accepted_count: u64 = 0;
    tokio::spawn(async move {
        loop {
            let Ok(permit) = pending.clone().acquire_owned().await else {
                return;
            };
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            let (socket, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors and the like: wait, do not spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            accepted_count += 1;
            if accepted_count.is_multiple_of(SWEEP_EVERY) {
                rate.retain_recent();
                rate.shrink_to_fit();
            }
            let ip = peer.ip().to_canonical();
            let Some(counted) = per_address.enter(ip) else {
                drop(permit);
                tracing::debug!(%peer, limit = MAX_PENDING_PER_ADDRESS,
                    "TLS connection refused: too many handshakes in progress from this address");
                if let Ok(slot) = refusals.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        refuse(socket).await;
                        drop(slot);
                    });
                }
                continue;
            };
            let _ = socket.set_nodelay(true);
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
            let (tx, handshakes, rate) = (tx.clone(), handshakes.clone(), rate.clone());
            tokio::spawn(async move {
                let _pending = (permit, &counted);
                let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
                let mut first = [0u8; 1];
                match tokio::time::timeout(FIRST_BYTE_TIMEOUT, socket.peek(&mut first)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) => return,
                    Err(_) => {
                        tracing::debug!(%peer, "TLS connection closed: no byte within the first-byte timeout");
                        return;
                    }
                }
                if tokio::time::timeout_at(deadline, rate.until_key_ready(&ip))
                    .await
                    .is_err()
                {
                    tracing::debug!(%peer,
                        "TLS handshake timed out waiting for its address's handshake rate");
                    return;
                }
                let slots = async {
                    let own = counted.slots.clone().acquire_owned().await;
                    let port = handshakes.acquire_owned().await;
                    (own, port)
                };
                let Ok((Ok(_own), Ok(_port))) = tokio::time::timeout_at(deadline, slots).await
                else {
                    tracing::debug!(%peer, "TLS handshake timed out waiting for a slot");
                    return;
                };
                match tokio::time::timeout_at(deadline, acceptor.accept(socket)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(stream).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake refused"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|stream| (Ok(stream), rx))
    })
}

/// Sends [`LIMIT_ALERT`], half-closes, and reads until the client closes
/// (at most [`REFUSAL_LINGER`]), so that closing never resets the
/// connection before the client read the alert.
async fn refuse(mut socket: TcpStream) {
    if socket.write_all(&LIMIT_ALERT).await.is_err() || socket.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}
