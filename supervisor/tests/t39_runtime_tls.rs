//! Scenario: the supervisor -> sandbox runtime channel speaks TLS 1.3, with
//! the identity the runtime's launcher made for it (issue 14).
//!
//! - given: a sandbox runtime started as a sandbox driver starts it (a
//!   certificate for the runtime's name, signed by a CA made for it alone)
//! - then: a plaintext gRPC call is not answered; a TLS call trusting that
//!   CA for that name reaches it (also dialled by IP); another name or
//!   another CA is refused; without the files (and without `--insecure`)
//!   the runtime refuses to start, naming the flags
//! - given: three gateways (the leader launches runtimes) and two
//!   supervisors running a demo sandbox
//! - then: the pool records where the runtime serves; exec works through
//!   the owner; after `kill -9` of the owner the other supervisor takes the
//!   sandbox over over TLS at the recorded endpoint (the runtime and
//!   workload keep their pids)

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proto::client::{ClientConfig, Role};
use proto::grant::GrantSigner;
use proto::pool_types::SandboxPhase;
use proto::sandbox_runtime::sandbox_runtime_client::SandboxRuntimeClient;
use proto::sandbox_runtime::RuntimeStatusRequest;
use proto::tls::generate::{Ca, Usage};
use proto::tls::ClientTls;
use testkit::supervisor::*;
use testkit::TestResult;

const BIN: &str = env!("CARGO_BIN_EXE_openshell-sandbox-runtime");

async fn wait_file(path: &Path) -> String {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if !text.trim().is_empty() {
            return text.trim().to_string();
        }
        assert!(Instant::now() < until, "no {}", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A plaintext Status call to `addr`: `Err` (or no answer within 10 s)
/// means refused.
async fn plaintext_status(addr: &str) -> Result<String, String> {
    let call = async {
        let mut c = SandboxRuntimeClient::connect(format!("http://{addr}"))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        c.status(RuntimeStatusRequest {})
            .await
            .map(|r| r.into_inner().sandbox_id)
            .map_err(|s| format!("status: {s}"))
    };
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap_or_else(|_| Err("no answer in 10 s".into()))
}

/// A TLS Status call to `addr` trusting `ca_pem`, verifying `name`.
async fn tls_status(addr: &str, name: &str, ca_pem: &str) -> TestResult<String> {
    let tls = ClientTls::from_ca_pem(ca_pem)?.with_server_name(name);
    let config = ClientConfig::for_role(Role::SupervisorToRuntime).with_tls(Some(tls));
    let channel = proto::client::connect(Role::SupervisorToRuntime, addr, &config).await?;
    let status = SandboxRuntimeClient::new(channel)
        .status(RuntimeStatusRequest {})
        .await?
        .into_inner();
    Ok(status.sandbox_id)
}

/// The DER of the first certificate in `pem`.
fn der(pem: &str) -> Vec<u8> {
    proto::tls::read_certs(Path::new("crt"), pem.as_bytes()).expect("certs")[0]
        .as_ref()
        .to_vec()
}

/// Whether the DER certificate carries basicConstraints (2.5.29.19) with
/// cA = TRUE.
fn is_ca(der: &[u8]) -> bool {
    let oid = [0x06, 0x03, 0x55, 0x1d, 0x13];
    der.windows(oid.len())
        .position(|w| w == oid)
        .is_some_and(|at| {
            der[at..]
                .windows(3)
                .take(16)
                .any(|w| w == [0x01, 0x01, 0xff])
        })
}

#[tokio::test]
async fn a_runtime_serves_tls_only_with_the_identity_it_is_given() -> TestResult {
    let dir = tempfile::tempdir()?;
    let addr_file = dir.path().join("t39.addr");
    let name = "sbx-t39-g1-0000abcd";
    let ca = Ca::ephemeral("runtime t39")?;
    let issued = ca.issue(dir.path(), "tls", &[name.to_string()], Usage::Server)?;
    let signer = GrantSigner::from_seed_hex(&"39".repeat(32))?;
    let spawn = |tls: bool, log: &str| -> TestResult<std::process::Child> {
        let log = std::fs::File::create(dir.path().join(log))?;
        let mut command = Command::new(BIN);
        command
            .args(["--sandbox-id", "t39", "--generation", "1"])
            .arg("--cluster-public-key")
            .arg(signer.public_key_hex())
            .arg("--addr-file")
            .arg(&addr_file)
            .env_remove("OPENSHELL_RUNTIME_INSECURE")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if tls {
            command
                .arg("--tls-cert-file")
                .arg(&issued.cert)
                .arg("--tls-key-file")
                .arg(&issued.key);
        }
        Ok(command.spawn()?)
    };

    eprintln!("--- step: without its TLS files (and not --insecure) it refuses to start");
    let status = spawn(false, "refused.log")?.wait()?;
    assert!(!status.success());
    let said = std::fs::read_to_string(dir.path().join("refused.log"))?;
    assert!(said.contains("--tls-cert-file"), "{said}");

    let mut child = spawn(true, "runtime.log")?;
    let addr = wait_file(&addr_file).await;
    assert!(!dir.path().join("t39.crt").exists(), "a .crt was published");

    eprintln!("--- step: a plaintext call is not answered");
    let plain = plaintext_status(&addr).await;
    assert!(plain.is_err(), "plaintext answered: {plain:?}");

    eprintln!("--- step: TLS trusting its CA for its name reaches it, dialled by IP");
    assert_eq!(tls_status(&addr, name, ca.cert_pem()).await?, "t39");
    let served = ClientTls::from_ca_pem(ca.cert_pem())?
        .with_server_name(name)
        .served_certificate(&addr)
        .await?;
    assert_eq!(served, der(&std::fs::read_to_string(&issued.cert)?));
    assert!(!is_ca(&served));

    eprintln!("--- step: another name, or another CA, is refused");
    assert!(tls_status(&addr, "sbx-other-g1-0000abcd", ca.cert_pem())
        .await
        .is_err());
    let other = Ca::ephemeral("another CA")?;
    assert!(tls_status(&addr, name, other.cert_pem()).await.is_err());

    eprintln!("--- step: SIGTERM removes the address file");
    let pid = libc::pid_t::try_from(child.id())?;
    // SAFETY: plain syscall.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let until = Instant::now() + Duration::from_secs(15);
    while child.try_wait()?.is_none() {
        assert!(Instant::now() < until, "the runtime did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!addr_file.exists());
    Ok(())
}

/// The pid of the runtime process holding `sandbox`.
fn runtime_pid(sandbox: &str) -> Option<u32> {
    let needle = format!("--sandbox-id\0{sandbox}\0");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        (String::from_utf8_lossy(&cmdline).contains(&needle) && alive(pid)).then_some(pid)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisors_run_and_take_over_sandboxes_over_tls() -> TestResult {
    let (cluster, gateways, _cleanup) = three_gateways(&timing(FAST_TIMING)).await;
    let mut supervisors = start_supervisors(&cluster, &gateways, &["s1", "s2"]).await;

    eprintln!("--- step: a sandbox runs; its runtime serves TLS only; exec works");
    let sb = running_sandbox(&cluster, "sb-39").await;
    let entry = testkit::runtimes::entry_of(&cluster.runtimes_dir(), "sb-39")?;
    let addr = entry.address().ok_or("no runtime address")?;
    assert_eq!(sb.runtime_address, addr, "the pool records where it serves");
    let ca_pem = entry.ca_pem().ok_or("no runtime CA")?;
    assert!(plaintext_status(&addr).await.is_err(), "plaintext answered");
    assert_eq!(tls_status(&addr, &entry.name, &ca_pem).await?, "sb-39");
    if testkit::root::is_root() {
        assert!(
            entry.netns().is_some() && !addr.starts_with("127."),
            "as root the runtime runs in its own network namespace: {addr}"
        );
    }
    let (before, owner) = read_counter(&cluster, "sb-39").await?;
    assert_eq!(owner, sb.owner);
    let pid = runtime_pid("sb-39").ok_or("no runtime process")?;

    eprintln!("--- step: kill -9 the owner {owner}; the other takes the sandbox over");
    let survivor = if owner == "s1" { "s2" } else { "s1" };
    supervisors
        .iter_mut()
        .find(|s| s.member == owner)
        .map(Supervisor::kill9);
    let after = wait_pool(&cluster, "taken over", Duration::from_secs(30), |s| {
        sandbox(s, "sb-39")
            // The first report of a new session may precede the workload
            // facts; wait for one that carries them.
            .map(|x| {
                x.owner == survivor
                    && x.phase() == SandboxPhase::Assigned
                    && x.acknowledged
                    && x.pid != 0
            })
            .unwrap_or(false)
    })
    .await;
    let moved = sandbox(&after, "sb-39").ok_or("sb-39")?;
    assert_eq!(
        (moved.pid, moved.started_at_unix_ms),
        (sb.pid, sb.started_at_unix_ms)
    );
    assert!(alive(pid), "the runtime {pid} is gone");
    assert_eq!(runtime_pid("sb-39"), Some(pid), "the runtime was replaced");
    let (_, by) = read_counter_above(&cluster, "sb-39", before).await?;
    assert_eq!(by, survivor);
    let status = runtime_client(&cluster, "sb-39")
        .await?
        .status(RuntimeStatusRequest {})
        .await?
        .into_inner();
    assert_eq!(status.active_member, survivor, "{status:?}");
    Ok(())
}
