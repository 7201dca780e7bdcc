//! Issue 13: the grant-signing key is rotated without downtime, the way
//! docs/security.md describes it.
//!
//! - given: three gateways signing with key OLD, two secure supervisors
//!   trusting {OLD} (a trusted grant keys file), two running sandboxes
//! - when: (1) the trusted keys file becomes {OLD, NEW} (edited in place:
//!   supervisors and runtimes re-read it); (2) the gateways restart one by
//!   one signing with NEW, a sandbox being created in the middle; (3) the
//!   file becomes {NEW}; (4) one supervisor is killed
//! - then: through (1)-(3) no sandbox changes owner, term, phase or
//!   workload pid, and the supervisors re-attach to every restarted
//!   gateway; the sandbox created during the mix runs; in (4) the
//!   survivor takes the killed one's sandboxes over with NEW-signed grants,
//!   accepted by runtimes started when only OLD was trusted

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proto::grant::GrantSigner;
use proto::pool_types::SandboxPhase;
use testkit::gateway::*;
use testkit::supervisor::*;
use testkit::TestResult;

const OLD: &str = "0e";
const NEW: &str = "ae";

fn seed(byte: &str) -> String {
    byte.repeat(32)
}

fn public(byte: &str) -> String {
    GrantSigner::from_seed_hex(&seed(byte))
        .unwrap_or_else(|e| panic!("{e}"))
        .public_key_hex()
}

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path.to_path_buf()
}

fn trusted(bytes: &[&str]) -> String {
    let mut text = String::from("# trusted grant keys\n");
    for b in bytes {
        text.push_str(&public(b));
        text.push('\n');
    }
    text
}

/// sandbox -> (owner, term, phase, pid).
type View = BTreeMap<String, (String, u64, i32, u32)>;

fn view(status: &proto::pool_admin::SupervisorPoolStatus) -> View {
    status
        .sandboxes
        .iter()
        .map(|s| (s.id.clone(), (s.owner.clone(), s.term, s.phase, s.pid)))
        .collect()
}

async fn all_ready(supervisors: &[Supervisor], why: &str) {
    let deadline = Instant::now() + Duration::from_secs(40);
    for s in supervisors {
        loop {
            let (code, body) = s.readyz().await;
            if code == 200 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{why}: {} unready: {body}",
                s.member
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signing_key_rotates_without_downtime() -> TestResult {
    let files = tempfile::tempdir()?;
    let key_file = |id: u64| files.path().join(format!("signing-{id}.key"));
    for id in 1..=3 {
        write(&key_file(id), &seed(OLD));
    }
    // Secure gateways (TLS, peer ports, admin token), each with its own
    // signing key file.
    let (root, material, mut nodes) = Cluster::secure_nodes(3, FAST_TIMING);
    // Supervisors and the runtimes the leader launches read one trusted
    // grant keys file (runtimes re-read it: a rotation reaches runtimes that
    // are already running).
    let trusted_file = write(&root.path().join("trusted-grant-keys"), &trusted(&[OLD]));
    for node in &mut nodes {
        node.set_flag(
            "--signing-key-file",
            key_file(node.id).display().to_string(),
        );
        node.set_flag(
            "--runtime-trusted-grant-keys-file",
            trusted_file.display().to_string(),
        );
    }
    let ca = material.ca.cert.clone();
    let mut cluster = Cluster::bootstrap_secure(root, material, nodes);
    cluster.wait_leader("bootstrap").await;
    let gateways: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    let dir = cluster.root.path().to_path_buf();
    let mut supervisors: Vec<Supervisor> = ["s1", "s2"]
        .iter()
        .map(|m| {
            let mut s = Supervisor::new(m, gateways.clone(), &dir);
            s.insecure = false;
            s.credential_file = Some(write(&dir.join(format!("{m}.credential")), "cred\n"));
            s.trusted_keys_file = Some(trusted_file.clone());
            s.tls_ca_file = Some(ca.clone());
            s
        })
        .collect();
    for s in &mut supervisors {
        s.start();
    }
    let _logs = LogsOnFailure(&supervisors);
    all_ready(&supervisors, "start").await;
    running_sandbox(&cluster, "sb-a").await;
    running_sandbox(&cluster, "sb-b").await;
    let before = view(&pool_status(&cluster).await?);

    eprintln!("--- step 1: supervisors and runtimes trust {{OLD, NEW}} (file edited in place)");
    write(&trusted_file, &trusted(&[OLD, NEW]));
    // Longer than the re-read interval (2 s).
    tokio::time::sleep(Duration::from_secs(3)).await;

    eprintln!("--- step 2: gateways restart one by one signing with NEW");
    for id in 1..=3u64 {
        let node = cluster.node(id);
        node.signal("-TERM");
        assert!(
            node.wait_exit(Duration::from_secs(30)).await.is_some(),
            "gateway {id} did not stop"
        );
        write(&key_file(id), &seed(NEW));
        cluster.node(id).start();
        cluster.wait_leader(&format!("gateway {id} back")).await;
        if id == 1 {
            // During the mix: a runtime started now trusts both keys.
            running_sandbox(&cluster, "sb-mix").await;
        }
        all_ready(&supervisors, &format!("after gateway {id} restarted")).await;
    }
    let status = wait_pool(
        &cluster,
        "every sandbox assigned",
        Duration::from_secs(30),
        |s| {
            s.sandboxes
                .iter()
                .all(|sb| sb.phase() == SandboxPhase::Assigned && sb.pid != 0)
        },
    )
    .await;
    let now = view(&status);
    for (id, was) in &before {
        assert_eq!(now.get(id), Some(was), "{id} changed during the rotation");
    }

    eprintln!("--- step 3: OLD is removed from the trusted set");
    write(&trusted_file, &trusted(&[NEW]));
    tokio::time::sleep(Duration::from_secs(3)).await;
    all_ready(&supervisors, "OLD removed").await;
    let now = view(&pool_status(&cluster).await?);
    for (id, was) in &before {
        assert_eq!(now.get(id), Some(was), "{id} changed when OLD was removed");
    }
    for s in &supervisors {
        assert!(
            !s.log().contains("untrusted grant key"),
            "{}: {}",
            s.member,
            s.log()
        );
    }

    eprintln!("--- step 4: a takeover signs with NEW; old runtimes accept it");
    let victim = before.get("sb-a").map(|v| v.0.clone()).unwrap_or_default();
    let survivor = if victim == "s1" { "s2" } else { "s1" };
    let taken: Vec<String> = now
        .iter()
        .filter(|(_, v)| v.0 == victim)
        .map(|(id, _)| id.clone())
        .collect();
    supervisors
        .iter()
        .filter(|s| s.member == victim)
        .for_each(|s| s.signal("-KILL"));
    let status = wait_pool(
        &cluster,
        "the victim's sandboxes taken over",
        Duration::from_secs(40),
        |s| {
            taken.iter().all(|id| {
                sandbox(s, id).is_some_and(|sb| {
                    sb.owner == survivor
                        && sb.phase() == SandboxPhase::Assigned
                        && sb.pid != 0
                        && sb.acknowledged
                })
            })
        },
    )
    .await;
    for id in &taken {
        let sb = sandbox(&status, id).ok_or("vanished")?;
        assert_eq!(sb.pid, now[id].3, "{id}: the workload was restarted");
        assert!(sb.term > now[id].1, "{id}: no new term");
    }
    Ok(())
}
