//! A data directory held by a running gateway is reported as in use, never
//! as damaged (issue 12 item 7).
//!
//! - given: a one-node cluster serving writes on its data directory
//! - when: a second gateway process is started on the same directory (other
//!   ports), and the offline tools (`recover`, `restore`, `local-status`)
//!   are pointed at it, while the first is paused (`kill -STOP`, so the
//!   directory holds still and can be compared byte for byte)
//! - then: each exits 1 saying the directory is in use by another process,
//!   naming the path and the first gateway's pid, and not "damaged"; no
//!   file changed; resumed, the first gateway keeps serving every write

mod common;

use std::path::Path;
use std::process::Command;

use common::cli::*;
use common::*;

/// The pid of the running gateway `node`, after checking that the process
/// is alive and that no process names `dir` on its command line (a second
/// gateway started by hand with `--data-dir`).
fn pid_of(node: &Gateway, dir: &Path) -> u32 {
    let pid = node
        .pid()
        .unwrap_or_else(|| panic!("node {} is not running", node.id));
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "node {} (pid {pid}) is gone",
        node.id
    );
    let out = Command::new("pgrep")
        .args(["-f", "--", &format!("--data-dir {}", dir.display())])
        .output()
        .unwrap_or_else(|e| panic!("pgrep: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.trim().is_empty(),
        "other processes on {}: {text}",
        dir.display()
    );
    pid
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill {sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_held_by_a_running_gateway_is_in_use_not_damaged() -> TestResult {
    eprintln!("--- step: a one-node cluster holds 20 writes");
    let cluster = Cluster::start(1, &[]);
    cluster.wait_leader("bootstrap").await;
    for i in 0..20 {
        put(cluster.get(1), &format!("k{i}"), "v").await?;
    }
    let dir = cluster.get(1).data_dir.clone();
    let pid = pid_of(cluster.get(1), &dir);
    let scratch = tempfile::tempdir()?;
    let backup = scratch.path().join("b.osbackup");
    let backup_arg = backup.display().to_string();
    let (code, _, err) = pool(&cluster.get(1).addr, &["backup", "save", &backup_arg]);
    assert_eq!(code, 0, "backup save: {err}");

    eprintln!("--- step: pause the gateway (pid {pid}); its lock stays held");
    signal(pid, "-STOP");
    let before = contents(&dir);
    let mut refusals: Vec<(&str, Command)> = Vec::new();
    let mut second = Command::new(gateway_bin());
    let listen = format!("127.0.0.1:{}", free_port());
    second
        .arg("--insecure")
        .args([
            "--node-id",
            "1",
            "--listen",
            &listen,
            "--cluster-id",
            "test",
        ])
        .arg("--data-dir")
        .arg(&dir);
    refusals.push(("second gateway", second));
    let mut recover = Command::new(gateway_bin());
    recover
        .args(["recover", "--force-new-cluster", "--node-id", "1"])
        .args(["--advertise", &listen, "--cluster-id", "test", "--data-dir"])
        .arg(&dir);
    refusals.push(("recover", recover));
    let mut restore = Command::new(gateway_bin());
    restore
        .args(["restore", "--from", &backup_arg, "--advertise", &listen])
        .arg("--data-dir")
        .arg(&dir);
    refusals.push(("restore", restore));
    let mut local = Command::new(pool_bin());
    local.args(["local-status", "--data-dir"]).arg(&dir);
    refusals.push(("local-status", local));

    for (what, cmd) in refusals {
        eprintln!("--- step: {what} on the directory in use");
        let (code, err) = run_to_end(cmd);
        assert_eq!(code, 1, "{what}: exit code; stderr: {err}");
        assert!(err.contains("in use by another process"), "{what}: {err}");
        assert!(
            err.contains(&format!("(pid {pid})")),
            "{what}: no pid: {err}"
        );
        assert!(
            err.contains(&dir.display().to_string()),
            "{what}: no path: {err}"
        );
        assert!(
            !err.contains("damaged") && !err.contains("restore this node"),
            "{what}: advice that wipes a healthy replica: {err}"
        );
        assert!(contents(&dir) == before, "{what}: files changed");
    }
    signal(pid, "-CONT");

    eprintln!("--- step: resumed, the first gateway still serves every write");
    cluster.wait_leader("resumed").await;
    put(cluster.get(1), "after", "v").await?;
    assert_eq!(dump(cluster.get(1), false).await?.len(), 21);
    assert_eq!(
        pid_of(cluster.get(1), &dir),
        pid,
        "the first gateway was replaced"
    );
    Ok(())
}
