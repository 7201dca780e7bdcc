//! `openshell-sandbox-runtime` as real processes: activation, fencing,
//! recovery deadline, relinquish, release, exec and flag validation.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proto::grant::GrantSigner;
use proto::sandbox_runtime::sandbox_runtime_client::SandboxRuntimeClient;
use proto::sandbox_runtime::{
    ActivateRequest, ExecRequest, ExecResponse, Grant, ReleaseRequest, RuntimeStatus,
    RuntimeStatusRequest, SessionRequest, SignedGrant, WorkloadInfo,
};
use supervisor::runtime::workload::process_start_unix_ms;
use tonic::transport::Channel;
use tonic::{Code, Status};

const BIN: &str = env!("CARGO_BIN_EXE_openshell-sandbox-runtime");
const SANDBOX: &str = "sb-1";

fn signer() -> GrantSigner {
    GrantSigner::from_seed_hex(&"42".repeat(32)).unwrap_or_else(|e| panic!("{e}"))
}

fn grant(member: &str, incarnation: u64, credential_epoch: u64) -> Grant {
    Grant {
        sandbox_id: SANDBOX.into(),
        generation: 1,
        member_id: member.into(),
        incarnation,
        term: credential_epoch * 10,
        credential_epoch,
        log_index: 100 + credential_epoch,
        release: false,
    }
}

fn signed(g: &Grant) -> Option<SignedGrant> {
    Some(signer().sign(g))
}

/// A runtime process, killed (with its workload) on drop.
struct Runtime {
    child: Child,
    /// Pid of the runtime when it was started through a spawner.
    pid: u32,
    addr: String,
    addr_file: PathBuf,
    log: PathBuf,
    workload_pid: Option<u32>,
    _dir: tempfile::TempDir,
}

fn kill(pid: u32, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        if pid > 1 {
            // SAFETY: plain syscall.
            unsafe { libc::kill(pid, signal) };
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        kill(self.pid, libc::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(pid) = self.workload_pid {
            if let Ok(pgid) = libc::pid_t::try_from(pid) {
                // SAFETY: plain syscall; the workload leads its own group.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
            }
        }
        if std::thread::panicking() {
            eprintln!(
                "--- runtime log ---\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}

fn wait_for_file(path: &Path, limit: Duration) -> Option<String> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Ok(text) = std::fs::read_to_string(path) {
            if !text.trim().is_empty() {
                return Some(text.trim().to_string());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn runtime_args(addr_file: &Path, flags: &[&str], workload: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--sandbox-id".into(),
        SANDBOX.into(),
        "--generation".into(),
        "1".into(),
        "--cluster-public-key".into(),
        signer().public_key_hex(),
        "--addr-file".into(),
        addr_file.display().to_string(),
        // These tests drive the runtime directly in plaintext (t39 covers TLS).
        "--insecure".into(),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    if !workload.is_empty() {
        args.push("--".into());
        args.extend(workload.iter().map(|s| s.to_string()));
    }
    args
}

fn start(flags: &[&str], workload: &[&str]) -> Runtime {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let addr_file = dir.path().join("runtime.addr");
    let log = dir.path().join("runtime.log");
    let log_file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}"));
    let err_file = log_file.try_clone().unwrap_or_else(|e| panic!("{e}"));
    let child = Command::new(BIN)
        .args(runtime_args(&addr_file, flags, workload))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(err_file)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {BIN}: {e}"));
    let pid = child.id();
    let mut rt = Runtime {
        child,
        pid,
        addr: String::new(),
        addr_file,
        log,
        workload_pid: None,
        _dir: dir,
    };
    rt.addr = wait_for_file(&rt.addr_file, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no runtime address"));
    rt
}

async fn connect(rt: &mut Runtime) -> SandboxRuntimeClient<Channel> {
    let client = SandboxRuntimeClient::connect(format!("http://{}", rt.addr))
        .await
        .unwrap_or_else(|e| panic!("connect {}: {e}", rt.addr));
    let mut c = client.clone();
    let status = c
        .status(RuntimeStatusRequest {})
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_inner();
    rt.workload_pid = status.workload.map(|w| w.pid);
    client
}

fn ok<T>(r: Result<tonic::Response<T>, Status>) -> T {
    r.unwrap_or_else(|s| panic!("unexpected {:?}: {}", s.code(), s.message()))
        .into_inner()
}

fn err<T: std::fmt::Debug>(r: Result<tonic::Response<T>, Status>, code: Code) -> Status {
    match r {
        Ok(v) => panic!("expected {code:?}, got {:?}", v.into_inner()),
        Err(s) => {
            assert_eq!(s.code(), code, "{}", s.message());
            s
        }
    }
}

async fn status(c: &mut SandboxRuntimeClient<Channel>) -> RuntimeStatus {
    ok(c.status(RuntimeStatusRequest {}).await)
}

async fn activate(c: &mut SandboxRuntimeClient<Channel>, g: &Grant) -> (String, WorkloadInfo) {
    let r = ok(c.activate(ActivateRequest { grant: signed(g) }).await);
    (
        r.session_token,
        r.workload.unwrap_or_else(|| panic!("no workload info")),
    )
}

async fn exec(
    c: &mut SandboxRuntimeClient<Channel>,
    token: &str,
    argv: &[&str],
) -> Result<ExecResponse, Status> {
    let req = ExecRequest {
        session_token: token.into(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        timeout_ms: 0,
    };
    c.exec(req).await.map(tonic::Response::into_inner)
}

async fn read_counter(c: &mut SandboxRuntimeClient<Channel>, token: &str) -> u64 {
    let out = exec(c, token, &["demo-read"])
        .await
        .unwrap_or_else(|s| panic!("demo-read: {s}"));
    assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("counter: {e}"))
}

async fn heartbeat(
    c: &mut SandboxRuntimeClient<Channel>,
    token: &str,
) -> Result<tonic::Response<WorkloadInfo>, Status> {
    c.heartbeat(SessionRequest {
        session_token: token.into(),
    })
    .await
}

/// `/proc/<pid>/stat` fields (1-based numbering as in proc(5)).
fn stat_field(pid: u32, field: usize) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_whitespace().nth(field - 3)?.parse().ok()
}

fn alive(pid: u32) -> bool {
    // A zombie is not alive.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.get(s.rfind(')')? + 2..s.rfind(')')? + 3)
                .map(|c| c != "Z")
        })
        .unwrap_or(false)
}

async fn wait_stopped(c: &mut SandboxRuntimeClient<Channel>, limit: Duration) -> RuntimeStatus {
    let until = Instant::now() + limit;
    loop {
        let s = status(c).await;
        if s.state == "stopped" || Instant::now() > until {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    None
}

#[tokio::test]
async fn activation_heartbeat_exec_and_a_fencing_handover_keep_the_workload() {
    let mut rt = start(&["--recovery-deadline-ms", "20000"], &[]);
    let mut c = connect(&mut rt).await;

    // The runtime leads its own session; the workload its own group.
    assert_eq!(
        stat_field(rt.pid, 6),
        Some(i64::from(rt.pid)),
        "runtime is a session leader"
    );
    let s = status(&mut c).await;
    assert_eq!(
        (s.sandbox_id.as_str(), s.state.as_str(), s.credential_epoch),
        (SANDBOX, "unsupervised", 0)
    );
    let w = s.workload.unwrap_or_default();
    assert_eq!(w.state, "running");
    assert_eq!(
        stat_field(w.pid, 5),
        Some(i64::from(w.pid)),
        "workload leads its own process group"
    );
    assert_eq!(Some(w.started_at_unix_ms), process_start_unix_ms(w.pid));
    assert!(!w.workload_addr.is_empty());

    let (a, info) = activate(&mut c, &grant("m1", 1, 1)).await;
    assert_eq!(a.len(), 32);
    assert_eq!(info, w);
    assert_eq!(ok(heartbeat(&mut c, &a).await), w);
    let s = status(&mut c).await;
    assert_eq!(
        (
            s.state.as_str(),
            s.active_member.as_str(),
            s.active_incarnation,
            s.credential_epoch,
            s.term
        ),
        ("supervised", "m1", 1, 1, 10)
    );
    let out = exec(
        &mut c,
        &a,
        &[
            "sh",
            "-c",
            "echo $OPENSHELL_SANDBOX_ID $OPENSHELL_WORKLOAD_PID $OPENSHELL_WORKLOAD_ADDR",
        ],
    )
    .await
    .unwrap_or_else(|s| panic!("{s}"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{SANDBOX} {} {}", w.pid, w.workload_addr)
    );
    let c1 = read_counter(&mut c, &a).await;

    tokio::time::sleep(Duration::from_millis(300)).await;
    // Takeover: a higher epoch fences m1.
    let (b, info) = activate(&mut c, &grant("m2", 4, 2)).await;
    assert_ne!(a, b);
    assert_eq!(
        (info.pid, info.started_at_unix_ms, info.state.as_str()),
        (w.pid, w.started_at_unix_ms, "running")
    );
    let denied = err(heartbeat(&mut c, &a).await, Code::PermissionDenied);
    assert!(
        denied.message().contains("fenced or unknown session"),
        "{}",
        denied.message()
    );
    err(
        c.exec(ExecRequest {
            session_token: a.clone(),
            argv: vec!["demo-read".into()],
            timeout_ms: 0,
        })
        .await,
        Code::PermissionDenied,
    );
    let c2 = read_counter(&mut c, &b).await;
    assert!(
        c2 > c1,
        "counter kept counting across the handover: {c1} -> {c2}"
    );
    ok(heartbeat(&mut c, &b).await);
    let s = status(&mut c).await;
    assert_eq!(
        (
            s.active_member.as_str(),
            s.active_incarnation,
            s.credential_epoch
        ),
        ("m2", 4, 2)
    );

    // Re-attach at the same epoch by the same member incarnation: new token.
    let (c3_token, info) = activate(&mut c, &grant("m2", 4, 2)).await;
    assert_ne!(c3_token, b);
    assert_eq!(info.pid, w.pid);
    err(heartbeat(&mut c, &b).await, Code::PermissionDenied);
    ok(heartbeat(&mut c, &c3_token).await);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let c3 = read_counter(&mut c, &c3_token).await;
    assert!(c3 > c2, "{c2} -> {c3}");
    assert!(alive(w.pid));
    assert_eq!(process_start_unix_ms(w.pid), Some(w.started_at_unix_ms));
}

#[tokio::test]
async fn stale_foreign_forged_misaddressed_and_malformed_requests_are_refused() {
    let mut rt = start(&["--recovery-deadline-ms", "20000"], &[]);
    let mut c = connect(&mut rt).await;
    let (token, _) = activate(&mut c, &grant("m1", 1, 5)).await;

    // I2: an earlier epoch is refused, naming both epochs.
    let stale = err(
        c.activate(ActivateRequest {
            grant: signed(&grant("m9", 1, 4)),
        })
        .await,
        Code::PermissionDenied,
    );
    assert!(
        stale.message().contains('4') && stale.message().contains('5'),
        "{}",
        stale.message()
    );
    // The current epoch belongs to m1 incarnation 1.
    err(
        c.activate(ActivateRequest {
            grant: signed(&grant("m2", 1, 5)),
        })
        .await,
        Code::PermissionDenied,
    );
    err(
        c.activate(ActivateRequest {
            grant: signed(&grant("m1", 2, 5)),
        })
        .await,
        Code::PermissionDenied,
    );
    // Signatures.
    let forged = GrantSigner::from_seed_hex(&"07".repeat(32))
        .unwrap_or_else(|e| panic!("{e}"))
        .sign(&grant("m2", 1, 6));
    err(
        c.activate(ActivateRequest {
            grant: Some(forged),
        })
        .await,
        Code::Unauthenticated,
    );
    let mut tampered = signer().sign(&grant("m2", 1, 6));
    tampered.grant = signer()
        .sign(&grant("m2", 1, 7))
        .grant
        .into_iter()
        .rev()
        .collect();
    err(
        c.activate(ActivateRequest {
            grant: Some(tampered),
        })
        .await,
        Code::Unauthenticated,
    );
    let garbage = SignedGrant {
        grant: vec![0xff; 7],
        signature: vec![],
    };
    err(
        c.activate(ActivateRequest {
            grant: Some(garbage),
        })
        .await,
        Code::Unauthenticated,
    );
    // Another sandbox's grant.
    let mut other = grant("m2", 1, 9);
    other.sandbox_id = "sb-other".into();
    err(
        c.activate(ActivateRequest {
            grant: signed(&other),
        })
        .await,
        Code::PermissionDenied,
    );
    // Release grants do not activate; a grant is required.
    let mut release = grant("m2", 1, 9);
    release.release = true;
    err(
        c.activate(ActivateRequest {
            grant: signed(&release),
        })
        .await,
        Code::InvalidArgument,
    );
    err(
        c.activate(ActivateRequest { grant: None }).await,
        Code::InvalidArgument,
    );

    // Exec: empty argv, unknown program, exit codes, timeout.
    err(
        c.exec(ExecRequest {
            session_token: token.clone(),
            argv: vec![],
            timeout_ms: 0,
        })
        .await,
        Code::InvalidArgument,
    );
    err(
        c.exec(ExecRequest {
            session_token: token.clone(),
            argv: vec!["/nonexistent/x".into()],
            timeout_ms: 0,
        })
        .await,
        Code::FailedPrecondition,
    );
    let out = exec(&mut c, &token, &["sh", "-c", "echo oops >&2; exit 3"])
        .await
        .unwrap_or_else(|s| panic!("{s}"));
    assert_eq!(
        (out.exit_code, out.stderr.as_slice()),
        (3, b"oops\n".as_slice())
    );
    let t = Instant::now();
    err(
        c.exec(ExecRequest {
            session_token: token.clone(),
            argv: vec!["sleep".into(), "10".into()],
            timeout_ms: 300,
        })
        .await,
        Code::DeadlineExceeded,
    );
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    err(heartbeat(&mut c, "").await, Code::PermissionDenied);
    err(
        heartbeat(&mut c, &"0".repeat(32)).await,
        Code::PermissionDenied,
    );

    // None of it disturbed the session or the workload.
    ok(heartbeat(&mut c, &token).await);
    let s = status(&mut c).await;
    assert_eq!(
        (
            s.state.as_str(),
            s.active_member.as_str(),
            s.credential_epoch
        ),
        ("supervised", "m1", 5)
    );
    assert_eq!(s.workload.map(|w| w.state).as_deref(), Some("running"));
}

#[tokio::test]
async fn recovery_deadline_stops_the_workload_with_supervisor_recovery_failed() {
    let mut rt = start(
        &[
            "--heartbeat-timeout-ms",
            "300",
            "--recovery-deadline-ms",
            "1500",
            "--linger-ms",
            "500",
        ],
        &[],
    );
    let mut c = connect(&mut rt).await;
    let (token, w) = activate(&mut c, &grant("m1", 1, 1)).await;
    let mut last = Instant::now();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        last = Instant::now();
        ok(heartbeat(&mut c, &token).await);
    }
    assert_eq!(status(&mut c).await.state, "supervised");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let s = status(&mut c).await;
    assert_eq!(s.state, "unsupervised");
    assert!(s.unsupervised_ms >= 200, "{}", s.unsupervised_ms);
    assert!(s.active_member.is_empty());
    let s = wait_stopped(&mut c, Duration::from_secs(6)).await;
    // Heartbeat timeout + recovery deadline after the last heartbeat.
    assert!(
        last.elapsed() >= Duration::from_millis(1800),
        "stopped too early: {:?}",
        last.elapsed()
    );
    assert_eq!(
        (s.state.as_str(), s.stop_reason.as_str()),
        ("stopped", "SupervisorRecoveryFailed")
    );
    assert_eq!(s.workload.map(|w| w.state).as_deref(), Some("stopped"));
    let until = Instant::now() + Duration::from_secs(4);
    while alive(w.pid) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(w.pid), "workload {} still alive", w.pid);
    // Too late: nothing revives it, not even a higher epoch.
    err(
        c.activate(ActivateRequest {
            grant: signed(&grant("m2", 1, 2)),
        })
        .await,
        Code::FailedPrecondition,
    );
    assert_eq!(ok(heartbeat(&mut c, &token).await).state, "stopped");
    // After the linger the runtime exits 0 and removes its address file.
    let exit = wait_exit(&mut rt.child, Duration::from_secs(5));
    assert!(exit.is_some_and(|e| e.success()), "{exit:?}");
    assert!(!rt.addr_file.exists());
}

#[tokio::test]
async fn recovery_deadline_counts_from_start_without_any_activation() {
    let mut rt = start(
        &[
            "--heartbeat-timeout-ms",
            "200",
            "--recovery-deadline-ms",
            "1000",
        ],
        &[],
    );
    let started = Instant::now();
    let mut c = connect(&mut rt).await;
    let s = wait_stopped(&mut c, Duration::from_secs(5)).await;
    assert_eq!(s.stop_reason, "SupervisorRecoveryFailed");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn relinquish_keeps_the_workload_running_until_the_next_activation() {
    let mut rt = start(&["--recovery-deadline-ms", "20000"], &[]);
    let mut c = connect(&mut rt).await;
    let (a, w) = activate(&mut c, &grant("m1", 1, 1)).await;
    let c1 = read_counter(&mut c, &a).await;
    let info = ok(c
        .relinquish(SessionRequest {
            session_token: a.clone(),
        })
        .await);
    assert_eq!((info.pid, info.state.as_str()), (w.pid, "running"));
    err(heartbeat(&mut c, &a).await, Code::PermissionDenied);
    err(
        c.relinquish(SessionRequest {
            session_token: a.clone(),
        })
        .await,
        Code::PermissionDenied,
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = status(&mut c).await;
    assert_eq!(
        (s.state.as_str(), s.active_member.as_str()),
        ("unsupervised", "")
    );
    assert!(s.unsupervised_ms >= 250, "{}", s.unsupervised_ms);
    assert!(alive(w.pid));
    // A planned move: the next owner comes with a higher epoch.
    let (b, info) = activate(&mut c, &grant("m2", 1, 2)).await;
    assert_eq!(
        (info.pid, info.started_at_unix_ms),
        (w.pid, w.started_at_unix_ms)
    );
    assert!(read_counter(&mut c, &b).await > c1);
    let s = status(&mut c).await;
    assert_eq!(
        (
            s.state.as_str(),
            s.active_member.as_str(),
            s.unsupervised_ms
        ),
        ("supervised", "m2", 0)
    );
}

#[tokio::test]
async fn release_stops_the_workload_and_nothing_revives_it() {
    let mut rt = start(&["--recovery-deadline-ms", "20000"], &[]);
    let mut c = connect(&mut rt).await;
    let (token, w) = activate(&mut c, &grant("m1", 1, 3)).await;
    let mut release = grant("gw", 0, 3);
    release.release = true;
    err(
        c.release(ReleaseRequest {
            grant: signed(&grant("m1", 1, 3)),
        })
        .await,
        Code::InvalidArgument,
    );
    err(
        c.release(ReleaseRequest { grant: None }).await,
        Code::InvalidArgument,
    );
    let mut stale = release.clone();
    stale.credential_epoch = 2;
    let s = err(
        c.release(ReleaseRequest {
            grant: signed(&stale),
        })
        .await,
        Code::PermissionDenied,
    );
    assert!(
        s.message().contains('2') && s.message().contains('3'),
        "{}",
        s.message()
    );
    let forged = GrantSigner::insecure_development_key("x").sign(&release);
    err(
        c.release(ReleaseRequest {
            grant: Some(forged),
        })
        .await,
        Code::Unauthenticated,
    );
    assert!(alive(w.pid));

    let info = ok(c
        .release(ReleaseRequest {
            grant: signed(&release),
        })
        .await);
    assert_eq!((info.pid, info.state.as_str()), (w.pid, "stopped"));
    assert!(!alive(w.pid), "Release answers once the workload is gone");
    let s = status(&mut c).await;
    assert_eq!(
        (s.state.as_str(), s.stop_reason.as_str()),
        ("stopped", "released")
    );
    // I8: nothing revives it.
    err(
        c.activate(ActivateRequest {
            grant: signed(&grant("m2", 1, 4)),
        })
        .await,
        Code::FailedPrecondition,
    );
    err(
        c.activate(ActivateRequest {
            grant: signed(&grant("m1", 1, 3)),
        })
        .await,
        Code::FailedPrecondition,
    );
    err(
        exec(&mut c, &token, &["demo-read"])
            .await
            .map(tonic::Response::new),
        Code::FailedPrecondition,
    );
    assert_eq!(
        ok(c.release(ReleaseRequest {
            grant: signed(&release)
        })
        .await)
        .state,
        "stopped"
    );
    assert_eq!(status(&mut c).await.stop_reason, "released");
}

#[tokio::test]
async fn a_workload_that_exits_by_itself_is_reported_then_the_runtime_exits() {
    let mut rt = start(&["--linger-ms", "700"], &["sh", "-c", "sleep 0.5; exit 7"]);
    let mut c = connect(&mut rt).await;
    let s = status(&mut c).await;
    let w = s.workload.unwrap_or_default();
    assert_eq!(
        (w.state.as_str(), w.workload_addr.as_str()),
        ("running", "")
    );
    let s = wait_stopped(&mut c, Duration::from_secs(5)).await;
    assert_eq!(s.stop_reason, "workload exited: exit status: 7");
    let exit = wait_exit(&mut rt.child, Duration::from_secs(5));
    assert!(exit.is_some_and(|e| e.success()), "{exit:?}");
}

#[tokio::test]
async fn the_runtime_survives_the_death_of_its_spawner() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let addr_file = dir.path().join("runtime.addr");
    let pid_file = dir.path().join("runtime.pid");
    let log = dir.path().join("runtime.log");
    let quoted: Vec<String> = runtime_args(&addr_file, &[], &[])
        .iter()
        .map(|a| format!("'{a}'"))
        .collect();
    let script = format!(
        "'{BIN}' {} >'{}' 2>&1 & echo $! >'{}'; wait",
        quoted.join(" "),
        log.display(),
        pid_file.display()
    );
    // The spawner leads its own process group; the runtime starts in it.
    let spawner = Command::new("sh")
        .args(["-c", &script])
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let spawner_pid = spawner.id();
    let pid: u32 = wait_for_file(&pid_file, Duration::from_secs(10))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no runtime pid"));
    let addr = wait_for_file(&addr_file, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no runtime address"));
    let mut rt = Runtime {
        child: spawner,
        pid,
        addr,
        addr_file,
        log,
        workload_pid: None,
        _dir: dir,
    };
    let mut c = connect(&mut rt).await;
    // kill -9 the spawner's whole process group.
    if let Ok(pgid) = libc::pid_t::try_from(spawner_pid) {
        // SAFETY: plain syscall.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
    assert!(wait_exit(&mut rt.child, Duration::from_secs(5)).is_some());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(alive(pid), "runtime died with its spawner");
    let s = status(&mut c).await;
    assert_eq!(s.workload.map(|w| w.state).as_deref(), Some("running"));
}

#[test]
fn an_invalid_cluster_public_key_exits_non_zero_naming_the_flag() {
    for (flag, env) in [
        (Some("zz"), None),
        (Some(&*"ab".repeat(31)), None),
        (None, Some("not-a-key")),
    ] {
        let mut cmd = Command::new(BIN);
        cmd.args(["--sandbox-id", SANDBOX])
            .env_remove("OPENSHELL_CLUSTER_PUBLIC_KEY");
        if let Some(key) = flag {
            cmd.args(["--cluster-public-key", key]);
        }
        if let Some(key) = env {
            cmd.env("OPENSHELL_CLUSTER_PUBLIC_KEY", key);
        }
        let out = cmd.output().unwrap_or_else(|e| panic!("{e}"));
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--cluster-public-key"), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}

#[tokio::test]
async fn a_workload_ignoring_sigterm_is_killed_after_the_grace() {
    // SIG_IGN is inherited across exec, so `sleep` ignores SIGTERM too.
    let mut rt = start(
        &["--recovery-deadline-ms", "20000"],
        &["sh", "-c", "trap '' TERM; sleep 30"],
    );
    let mut c = connect(&mut rt).await;
    let (_, w) = activate(&mut c, &grant("m1", 1, 1)).await;
    let mut release = grant("gw", 0, 1);
    release.release = true;
    let t = Instant::now();
    let info = ok(c
        .release(ReleaseRequest {
            grant: signed(&release),
        })
        .await);
    let took = t.elapsed();
    assert_eq!(info.state, "stopped");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_millis(4500),
        "SIGKILL 2 s after SIGTERM, took {took:?}"
    );
    assert!(!alive(w.pid));
    let s = status(&mut c).await;
    assert_eq!(s.stop_reason, "released");
}

/// A plaintext channel to the runtime.
async fn channel(rt: &Runtime) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{}", rt.addr))
        .unwrap_or_else(|e| panic!("{e}"))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect {}: {e}", rt.addr))
}

/// The health of `service` at the runtime.
async fn health(
    rt: &Runtime,
    service: &str,
) -> tonic_health::pb::health_check_response::ServingStatus {
    let mut client = tonic_health::pb::health_client::HealthClient::new(channel(rt).await);
    ok(client
        .check(tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        })
        .await)
    .status()
}

#[tokio::test]
async fn grpc_health_serves_while_the_workload_runs_and_reflection_lists_the_runtime() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let mut rt = start(&["--recovery-deadline-ms", "20000"], &[]);
    let mut c = connect(&mut rt).await;
    const RUNTIME: &str = "openshell.sandbox_runtime.v1.SandboxRuntime";
    assert_eq!(health(&rt, "").await, ServingStatus::Serving);
    assert_eq!(health(&rt, RUNTIME).await, ServingStatus::Serving);

    let mut reflection = ServerReflectionClient::new(channel(&rt).await);
    let asked = tokio_stream::iter([ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    }]);
    let mut answers = ok(reflection.server_reflection_info(asked).await);
    let answer = answers
        .message()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no reflection answer"));
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("not a service list: {answer:?}");
    };
    let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&RUNTIME), "{names:?}");
    assert!(names.contains(&"grpc.health.v1.Health"), "{names:?}");

    let (_token, _) = activate(&mut c, &grant("m1", 1, 3)).await;
    let mut release = grant("gw", 0, 3);
    release.release = true;
    ok(c.release(ReleaseRequest {
        grant: signed(&release),
    })
    .await);
    let deadline = Instant::now() + Duration::from_secs(5);
    while health(&rt, RUNTIME).await != ServingStatus::NotServing {
        assert!(Instant::now() < deadline, "still SERVING after the release");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(health(&rt, "").await, ServingStatus::NotServing);
}
