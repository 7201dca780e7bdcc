//! `openshell-pool dev` with runtimes launched by the gateway leader
//! (issue 14, docs/design/0003-sandbox-driver.md).
//!
//! - `dev` starts the whole system with one command: its gateways run the
//!   process driver over `<dir>/runtimes` (the runtime binary next to
//!   `openshell-pool`, namespaces `auto`, the runtimes reading the trusted
//!   grant keys file of the supervisors); supervisors get no
//!   `--runtime-dir`/`--runtime-bin`; the demo sandboxes run with a runtime
//!   address (`sandbox list`: RUNTIME column) and `sandbox exec demo-1 --
//!   demo-read` works
//! - the leader gateway killed (SIGKILL): the sandboxes keep running with the
//!   same runtime and workload pid, a new leader adopts them (no
//!   `RuntimeLost`), and a new sandbox launches under it
//! - Ctrl-C leaves no process (runtimes included), no runtime entry and, as
//!   root, no runtime network namespace behind
//! - `dev` again resumes: demo sandboxes running again with new runtimes
//! - `dev` killed (SIGKILL) with its gateways and supervisors, its runtimes
//!   left alive: `dev` again adopts a stale runtime still alive (a user
//!   sandbox keeps its runtime and workload pid), and its Ctrl-C stops that
//!   runtime too (not a descendant of the new `dev`) and removes its
//!   namespace

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::cli::*;
use common::*;
use serde_json::Value;

/// Waits until `dev`'s output holds `text`.
fn wait_output(dev: &Dev, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !dev.output().contains(text) {
        assert!(
            Instant::now() < deadline,
            "dev did not print {text:?}: {}",
            dev.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// (pid, command line) of every process whose command line mentions `dir`.
fn processes_naming(dir: &Path) -> Vec<(u32, String)> {
    let needle = dir.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let line = raw
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ");
            line.contains(&needle).then_some((pid, line))
        })
        .collect()
}

/// The pids of `dir`'s processes whose command line holds `what`.
fn pids_of(dir: &Path, what: &str) -> Vec<u32> {
    processes_naming(dir)
        .into_iter()
        .filter(|(_, line)| line.contains(what))
        .map(|(pid, _)| pid)
        .collect()
}

fn sigkill(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

fn alive(pid: u32) -> bool {
    // A zombie has no command line: it is gone for our purposes.
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !c.is_empty())
}

/// The names of the network namespaces `ip netns list` shows.
fn namespaces() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output();
    out.map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(ToString::to_string))
            .collect()
    })
    .unwrap_or_default()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The runtime entries under `<dir>/runtimes`: (name, pid, netns).
fn entries(dir: &Path) -> Vec<(String, Option<u32>, Option<String>)> {
    let Ok(read) = std::fs::read_dir(dir.join("runtimes")) else {
        return Vec::new();
    };
    let line = |p: PathBuf| {
        std::fs::read_to_string(p)
            .ok()
            .map(|t| t.trim().to_string())
    };
    read.flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            (!name.starts_with('.')).then(|| {
                (
                    name,
                    line(e.path().join("pid")).and_then(|p| p.parse().ok()),
                    line(e.path().join("netns")),
                )
            })
        })
        .collect()
}

/// The sandboxes of `sandbox list -o json`, by id: (phase, pid, runtime
/// address, runtime name, failure).
fn sandboxes(sec: &[String], e: &str) -> Vec<(String, String, u64, String, String, String)> {
    let list = json_as(sec, e, &["sandbox", "list"]);
    list.as_array()
        .into_iter()
        .flatten()
        .map(|s: &Value| {
            let text = |k: &str| s[k].as_str().unwrap_or_default().to_string();
            (
                text("id"),
                text("phase"),
                s["pid"].as_u64().unwrap_or(0),
                text("runtime_address"),
                text("runtime_name"),
                text("failure"),
            )
        })
        .collect()
}

/// Waits until every demo sandbox (and `more`) is assigned with a runtime
/// address; returns `sandbox list -o json`.
fn wait_running(sec: &[String], e: &str, ids: &[&str]) -> Value {
    json_until_as(sec, e, &["sandbox", "list"], "sandboxes running", |v| {
        ids.iter().all(|id| {
            v.as_array().into_iter().flatten().any(|s| {
                s["id"] == *id
                    && s["phase"] == "assigned"
                    && s["pid"].as_u64().unwrap_or(0) != 0
                    && !s["runtime_address"].as_str().unwrap_or_default().is_empty()
            })
        })
    })
}

/// After a stop: no process names `dir`, no runtime entry, no runtime
/// process of `before` alive, and (root) none of their namespaces.
fn assert_all_gone(dir: &Path, before: &[(String, Option<u32>, Option<String>)]) {
    assert_eq!(
        processes_naming(dir),
        Vec::<(u32, String)>::new(),
        "dev left processes behind"
    );
    assert_eq!(entries(dir), Vec::new(), "runtime entries left behind");
    for (name, pid, _) in before {
        if let Some(pid) = pid {
            assert!(!alive(*pid), "runtime {name} (pid {pid}) survived the stop");
        }
    }
    if is_root() {
        let left = namespaces();
        for (name, _, ns) in before {
            let ns = ns.clone().unwrap_or_else(|| name.clone());
            assert!(!left.contains(&ns), "namespace {ns} left behind: {left:?}");
        }
    }
}

const DEMOS: [&str; 3] = ["demo-1", "demo-2", "demo-3"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_launches_runtimes_through_the_leader_and_stops_them_all() -> TestResult {
    build_supervisor_bins();
    let root = tempfile::tempdir()?;
    let dir = root.path().join("dev");
    std::fs::create_dir_all(&dir)?;
    let base = free_base();
    let e = (0..3u16)
        .map(|i| format!("127.0.0.1:{}", base + i))
        .collect::<Vec<_>>()
        .join(",");
    let mut dev = Dev::start(&dir, base);
    wait_output(&dev, "Ctrl-C stops");
    let sec = dev.security();

    eprintln!("--- step: gateways run the process driver; supervisors start no runtimes");
    let lines = processes_naming(&dir);
    let runtime_bin = pool_bin().with_file_name("openshell-sandbox-runtime");
    let runtimes_dir = dir.join("runtimes");
    let mut gateways = 0;
    for (_, line) in lines
        .iter()
        .filter(|(_, l)| l.contains("openshell-gateway"))
    {
        gateways += 1;
        let driver = gateway_config_of(line).sandbox_driver.unwrap_or_default();
        assert_eq!(driver.kind.as_deref(), Some("process"), "{line}");
        assert_eq!(
            driver.process_dir.as_deref(),
            Some(runtimes_dir.as_path()),
            "{line}"
        );
        assert_eq!(
            driver.runtime_bin.as_deref(),
            Some(runtime_bin.as_path()),
            "{line}"
        );
        assert_eq!(driver.process_netns.as_deref(), Some("auto"), "{line}");
        let trusted = dir.join("tls").join("trusted-grant-keys");
        assert_eq!(
            driver.runtime_trusted_keys_file.as_deref(),
            Some(trusted.display().to_string().as_str()),
            "{line}"
        );
    }
    assert_eq!(gateways, 3, "{lines:?}");
    for (_, line) in lines
        .iter()
        .filter(|(_, l)| l.contains("openshell-supervisor"))
    {
        assert!(
            !line.contains("--runtime-dir") && !line.contains("--runtime-bin"),
            "{line}"
        );
    }

    eprintln!("--- step: demo sandboxes run with runtime addresses; exec works");
    wait_running(&sec, &e, &DEMOS);
    let first = sandboxes(&sec, &e);
    for (id, _, _, address, name, _) in first.iter().filter(|s| s.0.starts_with("demo-")) {
        assert!(!address.is_empty() && !name.is_empty(), "{id}: {first:?}");
    }
    let (code, table, err) = pool_as(&sec, &e, &["sandbox", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(table.contains("RUNTIME"), "{table}");
    for (_, _, _, address, _, _) in &first {
        assert!(table.contains(address.as_str()), "{address} not in {table}");
    }
    let (code, out, err) = pool_as(&sec, &e, &["sandbox", "exec", "demo-1", "--", "demo-read"]);
    assert_eq!(code, 0, "{err}");
    let counter: u64 = out.trim().parse()?;
    let launched = entries(&dir);
    assert_eq!(launched.len(), 3, "{launched:?}");
    assert!(
        launched.iter().all(|(_, pid, _)| pid.is_some_and(alive)),
        "{launched:?}"
    );
    if is_root() {
        let ns = namespaces();
        for (name, _, netns) in &launched {
            let netns = netns
                .as_deref()
                .ok_or(format!("{name}: no namespace as root"))?;
            assert!(ns.iter().any(|n| n == netns), "{netns} not in {ns:?}");
        }
    }

    eprintln!("--- step: the leader killed: sandboxes keep running, a new leader adopts");
    let status = json_as(&sec, &e, &["raft", "status"]);
    let leader = status["leader"].as_u64().ok_or("no leader")?;
    let leader_pid = processes_naming(&dir)
        .into_iter()
        .find(|(_, l)| {
            l.contains("openshell-gateway") && gateway_config_of(l).node_id == Some(leader)
        })
        .map(|(pid, _)| pid)
        .ok_or("no leader process")?;
    sigkill(leader_pid);
    let others: String = (0..3u16)
        .filter(|i| u64::from(*i) + 1 != leader)
        .map(|i| format!("127.0.0.1:{}", base + i))
        .collect::<Vec<_>>()
        .join(",");
    json_until_as(&sec, &others, &["raft", "status"], "a new leader", |v| {
        v["leader"].as_u64().is_some_and(|l| l != leader)
    });
    // A few launcher passes of the new leader (every 500 ms).
    std::thread::sleep(Duration::from_secs(4));
    let created = json_as(&sec, &others, &["sandbox", "create", "--id", "after"]);
    assert_eq!(created["id"], "after", "{created}");
    wait_running(&sec, &others, &["demo-1", "demo-2", "demo-3", "after"]);
    let kept = sandboxes(&sec, &others);
    for before in first.iter().filter(|s| s.0.starts_with("demo-")) {
        let now = kept
            .iter()
            .find(|s| s.0 == before.0)
            .ok_or("a demo sandbox vanished")?;
        assert_eq!(
            (&now.1, now.2, &now.3, &now.5),
            (&"assigned".to_string(), before.2, &before.3, &String::new()),
            "{} changed after the leader died",
            before.0
        );
    }
    let (code, out, err) = pool_as(
        &sec,
        &others,
        &["sandbox", "exec", "demo-1", "--", "demo-read"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.trim().parse::<u64>()? >= counter, "{out} < {counter}");
    assert!(
        launched.iter().all(|(_, pid, _)| pid.is_some_and(alive)),
        "a runtime died with the leader"
    );

    eprintln!("--- step: Ctrl-C stops every process, runtimes and namespaces included");
    let before = entries(&dir);
    assert_eq!(before.len(), 4, "{before:?}");
    dev.interrupt();
    assert_all_gone(&dir, &before);

    eprintln!("--- step: dev again resumes; demo sandboxes run again");
    let mut again = Dev::start(&dir, base);
    wait_output(&again, "Resumed the data");
    wait_output(&again, "Ctrl-C stops");
    wait_running(&sec, &e, &DEMOS);
    let (code, _, err) = pool_as(&sec, &e, &["sandbox", "exec", "demo-2", "--", "demo-read"]);
    assert_eq!(code, 0, "{err}");
    // Its runtime was stopped with the last run: the new leader says so.
    json_until_as(
        &sec,
        &e,
        &["sandbox", "get", "after"],
        "sandbox after failed RuntimeLost",
        |v| {
            v["phase"] == "failed"
                && v["failure"]
                    .as_str()
                    .is_some_and(|f| f.contains("RuntimeLost"))
        },
    );

    eprintln!("--- step: dev killed with its gateways and supervisors: runtimes left alive");
    let keep = json_as(&sec, &e, &["sandbox", "create", "--id", "keep"]);
    assert_eq!(keep["id"], "keep", "{keep}");
    let running = wait_running(&sec, &e, &["keep"]);
    let keep_before = running
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["id"] == "keep")
        .cloned()
        .ok_or("no keep")?;
    let stale = entries(&dir);
    let dev_pid = again.pid().ok_or("dev has no pid")?;
    sigkill(dev_pid);
    again.forget();
    for what in ["openshell-gateway", "openshell-supervisor"] {
        for pid in pids_of(&dir, what) {
            sigkill(pid);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while ["openshell-gateway", "openshell-supervisor"]
        .iter()
        .any(|w| !pids_of(&dir, w).is_empty())
    {
        assert!(Instant::now() < deadline, "gateways did not die");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        stale.iter().all(|(_, pid, _)| pid.is_some_and(alive)),
        "{stale:?}"
    );

    eprintln!("--- step: dev again adopts a live runtime of the killed run; Ctrl-C stops it");
    let mut third = Dev::start(&dir, base);
    wait_output(&third, "Ctrl-C stops");
    let running = wait_running(&sec, &e, &["demo-1", "demo-2", "demo-3", "keep"]);
    let keep_after = running
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["id"] == "keep")
        .cloned()
        .ok_or("no keep")?;
    for key in ["runtime_address", "runtime_name", "pid", "generation"] {
        assert_eq!(keep_after[key], keep_before[key], "{key}: {keep_after}");
    }
    let (code, _, err) = pool_as(&sec, &e, &["sandbox", "exec", "keep", "--", "demo-read"]);
    assert_eq!(code, 0, "{err}");
    let mut before = entries(&dir);
    before.extend(stale);
    third.interrupt();
    assert_all_gone(&dir, &before);
    Ok(())
}
