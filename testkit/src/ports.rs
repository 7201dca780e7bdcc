//! Free loopback ports for the processes a test starts.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Ports this test process handed out already.
static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Where the next search starts (0: not chosen yet).
static CURSOR: AtomicU32 = AtomicU32::new(0);

/// The lowest port handed out: below it are the well-known and registered
/// services a machine may run.
const LOWEST: u16 = 10_000;

/// A free loopback port (bound and released; the process under test binds
/// it next), never one this test process handed out before, and below the
/// kernel's ephemeral range.
///
/// Why below the ephemeral range: between the release and the process's
/// own bind, the kernel may give the port to anything that asks for one:
/// a `bind(0)` (two gateways of one cluster were handed the same address,
/// seen in t85: "address 127.0.0.1:45979 is listed for node ids 1 and
/// 2"), or the local end of an outgoing connection (t118 on 2026-12-06: a
/// gateway could not bind its peer port 127.0.0.1:44585, "Address already
/// in use", while another test's gateways reconnected through their
/// proxies). Ports below `ip_local_port_range` are never chosen by the
/// kernel for either. Where that range leaves too little room below it,
/// the kernel's own choice is taken, as before.
pub fn free_port() -> u16 {
    let high = ephemeral_low();
    if high < LOWEST + 1_000 {
        return free_ephemeral_port();
    }
    let span = u32::from(high - LOWEST);
    let mut offset = match CURSOR.load(Ordering::Relaxed) {
        0 => first_offset(span),
        next => next - 1,
    };
    for _ in 0..span {
        let candidate = u32::from(LOWEST) + offset;
        offset = (offset + 1) % span;
        let Ok(port) = u16::try_from(candidate) else {
            continue;
        };
        // A port handed out is never bound here again (its process may be
        // binding it); two threads may try one port: the set decides.
        if !GIVEN
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&port)
            && TcpListener::bind(("127.0.0.1", port)).is_ok()
            && GIVEN.lock().unwrap_or_else(|p| p.into_inner()).insert(port)
        {
            CURSOR.store(offset + 1, Ordering::Relaxed);
            return port;
        }
    }
    panic!("no free loopback port in {LOWEST}..{high}");
}

/// The first port of the kernel's ephemeral range (32768 on Linux by
/// default), read from `/proc/sys/net/ipv4/ip_local_port_range`.
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Where this process starts its search: spread by process id and start
/// time, so test processes running side by side start far apart.
fn first_offset(span: u32) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::process::id().wrapping_mul(7_919).wrapping_add(nanos) % span
}

/// The kernel's choice of a free port (`bind(0)`), never one this process
/// handed out before.
fn free_ephemeral_port() -> u16 {
    for _ in 0..64 {
        let listener =
            TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("no free port: {e}"));
        let port = listener
            .local_addr()
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("{e}"));
        if GIVEN.lock().unwrap_or_else(|p| p.into_inner()).insert(port) {
            return port;
        }
    }
    panic!("no loopback port not handed out already in 64 tries");
}

/// A port free on every one of `ips` (loopback addresses such as
/// `127.0.1.4`): gateways on distinct loopback IPs share it, so one
/// address template (`127.0.1.{node_id}:PORT`) names each of them.
pub fn free_port_on(ips: &[&str]) -> u16 {
    for _ in 0..100 {
        let port = free_port();
        if ips
            .iter()
            .all(|ip| TcpListener::bind(format!("{ip}:{port}")).is_ok())
        {
            return port;
        }
    }
    panic!("no port free on all of {ips:?}");
}
