//! Grants name the sandbox generation and a runtime (a real
//! `openshell-sandbox-runtime` process) checks it: a runtime started for
//! generation 2 refuses correctly signed grants and releases of generation 1
//! (and 0) of the same sandbox, without touching its workload or its
//! credential epoch, and accepts generation 2. A runtime without a
//! generation refuses to start.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proto::grant::GrantSigner;
use proto::sandbox_runtime::sandbox_runtime_client::SandboxRuntimeClient;
use proto::sandbox_runtime::{
    ActivateRequest, Grant, ReleaseRequest, RuntimeStatus, RuntimeStatusRequest, SignedGrant,
};
use tonic::transport::Channel;
use tonic::{Code, Status};

const BIN: &str = env!("CARGO_BIN_EXE_openshell-sandbox-runtime");
const SANDBOX: &str = "sb-gen";

fn signer() -> GrantSigner {
    GrantSigner::from_seed_hex(&"42".repeat(32)).unwrap_or_else(|e| panic!("{e}"))
}

fn grant(generation: u64, credential_epoch: u64, release: bool) -> Option<SignedGrant> {
    Some(signer().sign(&Grant {
        sandbox_id: SANDBOX.into(),
        generation,
        member_id: "m1".into(),
        incarnation: 1,
        term: credential_epoch,
        credential_epoch,
        log_index: 10 + credential_epoch,
        release,
    }))
}

/// A runtime process, killed (with its workload group) on drop.
struct Runtime {
    child: Child,
    log: PathBuf,
    workload_pid: Option<u32>,
    _dir: tempfile::TempDir,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(pgid) = self
            .workload_pid
            .and_then(|p| libc::pid_t::try_from(p).ok())
        {
            if pgid > 1 {
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

/// Starts a runtime for `generation`, given through the environment
/// (`OPENSHELL_SANDBOX_GENERATION`, the twin of `--generation`).
async fn start(generation: &str) -> (Runtime, SandboxRuntimeClient<Channel>) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let addr_file = dir.path().join("runtime.addr");
    let log = dir.path().join("runtime.log");
    let out = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}"));
    let err = out.try_clone().unwrap_or_else(|e| panic!("{e}"));
    let child = Command::new(BIN)
        .args(["--sandbox-id", SANDBOX, "--cluster-public-key"])
        .arg(signer().public_key_hex())
        .arg("--addr-file")
        .arg(&addr_file)
        .args(["--recovery-deadline-ms", "60000"])
        // Driven directly in plaintext (t39 covers TLS).
        .arg("--insecure")
        .env("OPENSHELL_SANDBOX_GENERATION", generation)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {BIN}: {e}"));
    let mut rt = Runtime {
        child,
        log,
        workload_pid: None,
        _dir: dir,
    };
    let until = Instant::now() + Duration::from_secs(20);
    let addr = loop {
        let text = std::fs::read_to_string(&addr_file).unwrap_or_default();
        if !text.trim().is_empty() {
            break text.trim().to_string();
        }
        assert!(Instant::now() < until, "no runtime address");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut client = SandboxRuntimeClient::connect(format!("http://{addr}"))
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    rt.workload_pid = status(&mut client).await.workload.map(|w| w.pid);
    (rt, client)
}

async fn status(c: &mut SandboxRuntimeClient<Channel>) -> RuntimeStatus {
    c.status(RuntimeStatusRequest {})
        .await
        .unwrap_or_else(|s| panic!("status: {s}"))
        .into_inner()
}

fn refused<T: std::fmt::Debug>(r: Result<tonic::Response<T>, Status>, what: &str) -> Status {
    match r {
        Ok(v) => panic!(
            "{what}: expected PERMISSION_DENIED, got {:?}",
            v.into_inner()
        ),
        Err(s) => {
            assert_eq!(s.code(), Code::PermissionDenied, "{what}: {}", s.message());
            s
        }
    }
}

fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Field 3 (after the parenthesised name) is the state; Z is a zombie.
    stat.rsplit_once(") ")
        .is_some_and(|(_, rest)| !rest.starts_with('Z'))
}

#[tokio::test]
async fn a_runtime_of_generation_2_refuses_grants_and_releases_of_generation_1() {
    let (rt, mut c) = start("2").await;
    let pid = rt.workload_pid.unwrap_or_else(|| panic!("no workload pid"));

    // Correctly signed, right sandbox, wrong generation: refused, and the
    // message names both generations.
    let s = refused(
        c.activate(ActivateRequest {
            grant: grant(1, 5, false),
        })
        .await,
        "activate generation 1",
    );
    assert!(
        s.message().contains("generation 1") && s.message().contains("generation 2"),
        "{}",
        s.message()
    );
    refused(
        c.release(ReleaseRequest {
            grant: grant(1, 5, true),
        })
        .await,
        "release generation 1",
    );
    refused(
        c.activate(ActivateRequest {
            grant: grant(0, 5, false),
        })
        .await,
        "activate generation 0",
    );
    let st = status(&mut c).await;
    assert_eq!(
        (st.state.as_str(), st.credential_epoch, st.generation),
        ("unsupervised", 0, 2),
        "refused grants touch nothing"
    );
    assert!(alive(pid), "the workload runs on");

    // The runtime's own generation is accepted.
    let reply = c
        .activate(ActivateRequest {
            grant: grant(2, 1, false),
        })
        .await
        .unwrap_or_else(|s| panic!("activate generation 2: {s}"))
        .into_inner();
    assert!(!reply.session_token.is_empty());

    // A release of the old generation at a higher epoch still touches
    // nothing: the workload runs, the epoch stays, the session holds.
    refused(
        c.release(ReleaseRequest {
            grant: grant(1, 9, true),
        })
        .await,
        "release generation 1 at a higher epoch",
    );
    let st = status(&mut c).await;
    assert_eq!(
        (
            st.state.as_str(),
            st.credential_epoch,
            st.active_member.as_str()
        ),
        ("supervised", 1, "m1")
    );
    assert!(alive(pid), "the workload runs on");

    // The release of generation 2 stops it.
    let info = c
        .release(ReleaseRequest {
            grant: grant(2, 1, true),
        })
        .await
        .unwrap_or_else(|s| panic!("release generation 2: {s}"))
        .into_inner();
    assert_eq!(info.state, "stopped");
}

#[test]
fn a_runtime_without_a_generation_refuses_to_start() {
    for generation in [None, Some("0")] {
        let mut cmd = Command::new(BIN);
        cmd.args(["--sandbox-id", SANDBOX, "--cluster-public-key"])
            .arg(signer().public_key_hex())
            .env_remove("OPENSHELL_SANDBOX_GENERATION")
            .stdin(Stdio::null());
        if let Some(g) = generation {
            cmd.env("OPENSHELL_SANDBOX_GENERATION", g);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let until = Instant::now() + Duration::from_secs(10);
        while child.try_wait().ok().flatten().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        if child.try_wait().ok().flatten().is_none() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("generation {generation:?}: the runtime started");
        }
        let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--generation"), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}
