//! Scenario: a host embeds the gateway in its own tonic server
//! (`examples/embedded_gateway.rs`).
//!
//! - given: a host process (this test) that starts a gateway without ports
//!   ([`gateway_plugin::embed::Gateway`]) and serves its routes next to a
//!   gRPC service of its own on one port
//! - then: a client of that port reaches both: the host's
//!   `host.v1.Greeter/Hello`, and the gateway's ObjectStore (a put, read
//!   back); the gateway becomes ready and stops within its bound, and the
//!   host's server drains
//! - and: the example, built as a program, does the same as a process (what
//!   a reader of the example runs)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use testkit::TestResult;

#[allow(dead_code)]
#[path = "../examples/embedded_gateway.rs"]
mod example;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_serves_the_gateway_next_to_its_own_service() -> TestResult {
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let smoke = example::run(example::Options {
        data_dir: dir.path().join("gateway"),
        listen: "127.0.0.1:0".parse()?,
        smoke: true,
    })
    .await?
    .ok_or("a smoke run reports what it saw")?;
    assert!(smoke.resource_version > 0, "{smoke:?}");
    assert_eq!(smoke.payload, b"hello from the host".to_vec(), "{smoke:?}");
    eprintln!("in-process host: {smoke:?} in {:?}", started.elapsed());

    eprintln!("--- step: the gateway's data survives its stop: a second host reads it");
    let again = example::run(example::Options {
        data_dir: dir.path().join("gateway"),
        listen: "127.0.0.1:0".parse()?,
        smoke: true,
    })
    .await?
    .ok_or("a smoke run reports what it saw")?;
    assert!(
        again.resource_version > smoke.resource_version,
        "the restarted gateway's put came after the first one: {again:?} vs {smoke:?}"
    );
    Ok(())
}

/// `target/<profile>/examples/embedded_gateway`, built up to date (`cargo
/// test --workspace` builds it with the tests; `--test t111_embedded` alone
/// does not).
fn example_bin() -> TestResult<PathBuf> {
    let profile = testkit::bins::profile_dir();
    let target = profile.parent().ok_or("a target directory")?;
    let mut build = testkit::bins::cargo();
    build
        .current_dir(testkit::bins::workspace_root())
        // `--tests`: the features of `cargo test`'s build (testkit::bins).
        .args([
            "build",
            "--workspace",
            "--exclude",
            "sim",
            "--examples",
            "--tests",
        ])
        .arg("--target-dir")
        .arg(target);
    if profile.file_name().is_some_and(|p| p == "release") {
        build.arg("--release");
    }
    let status = build.status()?;
    if !status.success() {
        return Err(
            format!("cargo build --workspace --exclude sim --examples --tests: {status}").into(),
        );
    }
    let bin = profile.join("examples").join("embedded_gateway");
    if !bin.is_file() {
        return Err(format!("{} missing after the build", bin.display()).into());
    }
    Ok(bin)
}

#[test]
fn the_example_runs_as_a_program() -> TestResult {
    let bin = example_bin()?;
    let dir = tempfile::tempdir()?;
    let mut child = std::process::Command::new(&bin)
        .args(["--smoke", "--data-dir"])
        .arg(dir.path().join("gateway"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("the example did not finish within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        status.success(),
        "{status}\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("Greeter/Hello answered"), "{stdout}");
    assert!(stdout.contains("\"hello from the host\""), "{stdout}");
    Ok(())
}
