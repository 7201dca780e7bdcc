//! Free loopback ports for the processes a test starts.

use std::net::TcpListener;

/// A free loopback port (bound and released; the process under test binds
/// it next).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("no free port: {e}"));
    listener
        .local_addr()
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
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
