//! Free loopback ports for the processes a test starts.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// Ports this test process handed out already.
static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A free loopback port (bound and released; the process under test binds
/// it next), never one this test process handed out before: the kernel
/// may give a released port to the next `bind(0)` at once, and two
/// gateways of one cluster were then handed the same address (seen in t85:
/// "address 127.0.0.1:45979 is listed for node ids 1 and 2").
pub fn free_port() -> u16 {
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
