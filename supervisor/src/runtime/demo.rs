//! The built-in demo workload and its reader.
//!
//! `demo-workload` keeps an in-memory `u64` counter, incremented every
//! 100 ms, and serves it on `127.0.0.1:0`: each TCP connection receives the
//! current value as a decimal line, then the connection closes. Its memory
//! is the state a takeover must preserve: a counter that keeps increasing
//! across a supervisor handover proves the process was untouched.
//!
//! `demo-read` connects to the address and returns the counter.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counter increment period.
pub const TICK: Duration = Duration::from_millis(100);

/// A demo workload or reader failure.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Socket or file I/O failed.
    #[error("{what}: {error}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// The address is not `ip:port`.
    #[error("bad workload address {0:?}")]
    BadAddr(String),
    /// The workload answered something other than a counter.
    #[error("workload answered {0:?}, not a counter")]
    BadAnswer(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DemoError {
    let what = what.into();
    move |error| DemoError::Io { what, error }
}

/// Writes `contents` to `path` atomically: a temporary file beside it, then
/// rename.
///
/// # Errors
/// The I/O error of the write or the rename.
pub fn write_atomically(path: &Path, contents: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(contents.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Runs the demo workload until killed: binds `127.0.0.1:0`, writes the
/// bound address to `addr_file`, serves the counter. Exits the process when
/// its parent (the runtime) goes away.
///
/// # Errors
/// Binding or writing the address file failed.
pub fn serve_counter(addr_file: &Path) -> Result<(), DemoError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("bind 127.0.0.1:0"))?;
    let addr = listener.local_addr().map_err(io("local address"))?;
    let counter = Arc::new(AtomicU64::new(0));
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    let ticker = Arc::clone(&counter);
    std::thread::spawn(move || loop {
        std::thread::sleep(TICK);
        ticker.fetch_add(1, Ordering::SeqCst);
        // SAFETY: as above.
        if unsafe { libc::getppid() } != parent {
            // Orphaned: the runtime that holds us is gone.
            std::process::exit(0);
        }
    });
    write_atomically(addr_file, &addr.to_string())
        .map_err(io(format!("write {}", addr_file.display())))?;
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let _ = writeln!(stream, "{}", counter.load(Ordering::SeqCst));
    }
    Ok(())
}

/// Reads the counter from a demo workload at `addr`.
///
/// # Errors
/// Bad address, connection failure or an answer that is not a number.
pub fn read_counter(addr: &str) -> Result<u64, DemoError> {
    let sock: SocketAddr = addr
        .trim()
        .parse()
        .map_err(|_| DemoError::BadAddr(addr.to_string()))?;
    let mut stream = TcpStream::connect_timeout(&sock, Duration::from_secs(5))
        .map_err(io(format!("connect {sock}")))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io("set read timeout"))?;
    let mut text = String::new();
    stream
        .read_to_string(&mut text)
        .map_err(io(format!("read {sock}")))?;
    text.trim()
        .parse()
        .map_err(|_| DemoError::BadAnswer(text.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_the_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("addr");
        assert!(write_atomically(&path, "1.2.3.4:5").is_ok());
        assert!(write_atomically(&path, "127.0.0.1:9").is_ok());
        assert_eq!(
            std::fs::read_to_string(&path).ok().as_deref(),
            Some("127.0.0.1:9")
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).map(|d| d.count()).ok(),
            Some(1)
        );
        assert!(matches!(read_counter("nope"), Err(DemoError::BadAddr(_))));
    }
}
