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
