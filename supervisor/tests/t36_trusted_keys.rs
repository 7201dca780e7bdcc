//! Issue 13: supervisors and runtimes trust only the grant keys they are
//! configured with (`--trusted-grant-keys-file`), never one learned from
//! the wire.
//!
//! - given: a gateway signing grants with key A; a secure supervisor whose
//!   trusted set is {B}
//! - when: it says hello; then its trusted keys file is edited to {A}
//! - then: it refuses to attach, with one clear log line naming A's
//!   fingerprint and the flag, and stays unready; after the edit (no
//!   restart) it attaches and runs a sandbox whose runtime verifies the
//!   grant against the same file
//! - and: a runtime (a real `openshell-sandbox-runtime` process) trusting
//!   {B} refuses a grant signed by A (UNAUTHENTICATED naming its trusted
//!   set), accepts one signed by B, and takes A once its file lists A

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proto::grant::GrantSigner;
use proto::pool_types::SandboxPhase;
use proto::sandbox_runtime::sandbox_runtime_client::SandboxRuntimeClient;
use proto::sandbox_runtime::{ActivateRequest, Grant, SignedGrant};
use testkit::gateway::*;
use testkit::supervisor::*;
use testkit::TestResult;
use tonic::Code;

const RUNTIME: &str = env!("CARGO_BIN_EXE_openshell-sandbox-runtime");

/// A key's fingerprint as docs/security.md defines it: the first 16 hex
/// characters of the public key.
fn fingerprint(public_hex: &str) -> String {
    public_hex[..16].to_string()
}

fn key_a() -> GrantSigner {
    GrantSigner::from_seed_hex(&"a1".repeat(32)).unwrap_or_else(|e| panic!("{e}"))
}

fn key_b() -> GrantSigner {
    GrantSigner::from_seed_hex(&"b2".repeat(32)).unwrap_or_else(|e| panic!("{e}"))
}

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path.to_path_buf()
}

fn trusted(keys: &[&GrantSigner]) -> String {
    let mut text = String::from("# trusted grant keys\n");
    for k in keys {
        text.push_str(&k.public_key_hex());
        text.push('\n');
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_refuses_a_gateway_signing_with_an_untrusted_key() -> TestResult {
    // A secure gateway (TLS, peer port, admin token) signing with A.
    let (root, material, nodes) = Cluster::secure_nodes(
        1,
        &["--tick-interval-ms", "100", "--heartbeat-ttl-ms", "1000"],
    );
    write(&material.signing_key, &"a1".repeat(32));
    let ca = material.ca.cert.clone();
    let cluster = Cluster::bootstrap_secure(root, material, nodes);
    cluster.wait_leader("bootstrap").await;
    let gateways: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    let dir = cluster.root.path();
    let trusted_file = write(&dir.join("trusted-grant-keys"), &trusted(&[&key_b()]));

    eprintln!("--- step: a supervisor trusting only B refuses the gateway signing with A");
    let mut s = Supervisor::new("m1", gateways.clone(), dir);
    s.insecure = false;
    s.credential_file = Some(write(&dir.join("m1.credential"), "m1-credential\n"));
    s.trusted_keys_file = Some(trusted_file.clone());
    s.tls_ca_file = Some(ca);
    s.start();
    let _logs = LogsOnFailure(std::slice::from_ref(&s));
    let fp_a = fingerprint(&key_a().public_key_hex());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.log().contains("untrusted grant key") {
        assert!(Instant::now() < deadline, "no refusal logged:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = s.log();
    let line = log
        .lines()
        .find(|l| l.contains("untrusted grant key"))
        .unwrap_or_default();
    assert!(
        line.contains(&fp_a)
            && line.contains("--trusted-grant-keys-file")
            && line.contains(&fingerprint(&key_b().public_key_hex())),
        "{line}"
    );
    let (code, body) = s.readyz().await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("untrusted grant key"), "{body}");

    eprintln!("--- step: the file now lists A: the running supervisor attaches (no restart)");
    write(&trusted_file, &trusted(&[&key_b(), &key_a()]));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, body) = s.readyz().await;
        if code == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "still unready: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(s.log().contains("trusted grant keys file reloaded"));
    let sb = running_sandbox(&cluster, "sb-36").await;
    assert_eq!(sb.phase(), SandboxPhase::Assigned);
    assert_eq!(sb.owner, "m1");
    let runtime_log = testkit::runtimes::entry_of(&cluster.runtimes_dir(), "sb-36")?.log();
    assert!(!runtime_log.contains("refused"), "{runtime_log}");
    Ok(())
}

/// A runtime process trusting the keys of `file`, killed on drop.
struct Runtime {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .args(["-9", "-f", &self._dir.path().display().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn grant(signer: &GrantSigner, epoch: u64) -> Option<SignedGrant> {
    Some(signer.sign(&Grant {
        sandbox_id: "sb-keys".into(),
        generation: 1,
        member_id: "m1".into(),
        incarnation: 1,
        term: epoch,
        credential_epoch: epoch,
        log_index: epoch,
        release: false,
    }))
}

#[tokio::test]
async fn a_runtime_refuses_grants_of_an_untrusted_key() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = write(&dir.path().join("trusted"), &trusted(&[&key_b()]));
    let addr_file = dir.path().join("runtime.addr");
    let log =
        std::fs::File::create(dir.path().join("runtime.log")).unwrap_or_else(|e| panic!("{e}"));
    let err = log.try_clone().unwrap_or_else(|e| panic!("{e}"));
    let child = Command::new(RUNTIME)
        .args(["--sandbox-id", "sb-keys", "--generation", "1"])
        .arg("--trusted-grant-keys-file")
        .arg(&file)
        .arg("--addr-file")
        .arg(&addr_file)
        // Driven directly in plaintext (t39 covers TLS).
        .arg("--insecure")
        .env_remove("OPENSHELL_CLUSTER_PUBLIC_KEY")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let rt = Runtime { child, _dir: dir };
    let until = Instant::now() + Duration::from_secs(20);
    let addr = loop {
        let text = std::fs::read_to_string(&addr_file).unwrap_or_default();
        if !text.trim().is_empty() {
            break text.trim().to_string();
        }
        assert!(Instant::now() < until, "no runtime address");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut c = SandboxRuntimeClient::connect(format!("http://{addr}"))
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));

    eprintln!("--- step: a grant signed by A (untrusted) is refused, naming the trusted set");
    let refused = c
        .activate(ActivateRequest {
            grant: grant(&key_a(), 1),
        })
        .await
        .err()
        .unwrap_or_else(|| panic!("an untrusted grant was accepted"));
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused}");
    let message = refused.message();
    assert!(
        message.contains("not signed by a trusted grant key")
            && message.contains(&fingerprint(&key_b().public_key_hex()))
            && message.contains("--trusted-grant-keys-file"),
        "{message}"
    );

    eprintln!("--- step: a grant signed by B (trusted) is accepted");
    c.activate(ActivateRequest {
        grant: grant(&key_b(), 1),
    })
    .await
    .unwrap_or_else(|s| panic!("trusted grant refused: {s}"));

    eprintln!("--- step: the file now lists A too: A's grants are accepted (no restart)");
    write(&file, &trusted(&[&key_b(), &key_a()]));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c
            .activate(ActivateRequest {
                grant: grant(&key_a(), 2),
            })
            .await
        {
            Ok(_) => break,
            Err(s) => assert!(
                s.code() == Code::Unauthenticated && Instant::now() < deadline,
                "{s}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(rt);
}
