//! A busy port is refused before anything is created.
//!
//! - given: a loopback port another process listens on, and a data
//!   directory path that does not exist yet
//! - when: a gateway is started with `--http-listen`, or `--listen`, on
//!   that port
//! - then: it exits with rc 1 and one stderr line naming the flag and the
//!   address, and the data directory was not created

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::bins::gateway_bin;
use testkit::ports::free_port;
use testkit::TestResult;

/// Runs the gateway with `--listen listen --http-listen http` on `dir`;
/// returns (exit code, stderr), or panics if it still runs after 20 s.
fn run_gateway(dir: &Path, listen: &str, http: &str) -> (Option<i32>, String) {
    let mut child = Command::new(gateway_bin())
        .arg("--insecure")
        .args(["--node-id", "1", "--cluster-id", "test"])
        .args(["--listen", listen, "--http-listen", http])
        .args(["--initial-voters", &format!("1={listen}")])
        .arg("--data-dir")
        .arg(dir)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn gateway: {e}"));
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut s) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut s, &mut err);
            }
            return (status.code(), err);
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the gateway still runs after 20 s on a busy port");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_busy_port_exits_1_naming_the_flag_and_creates_nothing() -> TestResult {
    let busy = std::net::TcpListener::bind("127.0.0.1:0")?;
    let busy_addr = busy.local_addr()?.to_string();
    let scratch = tempfile::tempdir()?;
    for (flag, listen, http) in [
        (
            "--http-listen",
            format!("127.0.0.1:{}", free_port()),
            busy_addr.clone(),
        ),
        (
            "--listen",
            busy_addr.clone(),
            format!("127.0.0.1:{}", free_port()),
        ),
    ] {
        eprintln!("--- step: {flag} on the busy port {busy_addr}");
        let dir = scratch.path().join(flag.trim_start_matches('-'));
        let (code, stderr) = run_gateway(&dir, &listen, &http);
        println!("{flag}: rc {code:?}, stderr: {}", stderr.trim());
        assert_eq!(code, Some(1), "{flag}: rc {code:?}; stderr: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains(&busy_addr),
            "{flag}: stderr does not name the flag and {busy_addr}: {stderr}"
        );
        assert!(
            !dir.exists(),
            "{flag}: the data directory {} was created",
            dir.display()
        );
    }
    drop(busy);
    Ok(())
}
