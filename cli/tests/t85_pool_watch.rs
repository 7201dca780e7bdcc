//! Scenario: an operator follows a takeover live with `openshell-pool pool
//! status --watch` (the pool's changes as events, not polling).
//!
//! - given: three gateways (heartbeat TTL 1.5 s, ticks of 100 ms), members
//!   m1 and m2 (scripted, real Attach streams), a sandbox `w1`
//! - when: `pool status --watch -o json` runs (piped) against the three
//!   gateways, and the member owning `w1` stops
//! - then: a document printed as it happens shows `w1` owned by the other
//!   member; no gateway served a single `GetSupervisorPoolStatus` (the
//!   watch follows `PoolAdmin.WatchPool`; before it, `--watch` polled
//!   that call every interval)
//! - when: the gateway the watch goes through is killed with `kill -9`,
//!   and a sandbox `w2` is created
//! - then: the CLI says on stderr that it watches again, and goes on: a
//!   later document lists `w2`
//! - then: `sandbox list --watch -o json` prints the sandboxes as a JSON
//!   array per change

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::cli::*;
use common::*;
use serde_json::Value;
use testkit::member::ScriptedMember;
use testkit::supervisor::http_get;

/// A running `openshell-pool ... --watch -o json`: its documents as they
/// come, and its stderr.
struct Watching {
    child: Child,
    documents: mpsc::Receiver<Value>,
    stderr: std::thread::JoinHandle<String>,
}

impl Watching {
    fn start(endpoints: &str, args: &[&str]) -> TestResult<Watching> {
        let mut child = Command::new(pool_bin())
            .args(["--insecure", "--endpoints", endpoints])
            .args(args)
            .args(["--watch", "-o", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let (tx, documents) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match serde_json::from_str(&line) {
                    Ok(document) => {
                        if tx.send(document).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        panic!("--watch -o json printed a line that is not JSON ({e}): {line}")
                    }
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        Ok(Watching {
            child,
            documents,
            stderr,
        })
    }

    /// The first document printed within `within` that satisfies `ok`.
    fn until(&self, why: &str, within: Duration, ok: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        let mut last = Value::Null;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.documents.recv_timeout(left) {
                Ok(document) if ok(&document) => return document,
                Ok(document) => last = document,
                Err(_) => panic!("{why}: no such document within {within:?}; the last: {last}"),
            }
        }
    }

    /// Stops it; returns its stderr.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr.join().unwrap_or_default()
    }
}

/// The owner of sandbox `id` in a `pool status` document.
fn owner(document: &Value, id: &str) -> Option<String> {
    document["sandboxes"]
        .as_array()?
        .iter()
        .find(|s| s["id"] == id)
        .and_then(|s| s["owner"].as_str())
        .filter(|o| !o.is_empty())
        .map(str::to_string)
}

/// How many `GetSupervisorPoolStatus` calls `node` handled.
async fn status_calls(node: &Gateway) -> TestResult<u64> {
    let addr = node.http_addr().ok_or("no --http-listen")?;
    let (code, body) = http_get(&addr, "/metrics").await;
    assert_eq!(code, 200, "/metrics: {body}");
    Ok(body
        .lines()
        .filter(|l| l.starts_with("grpc_server_handled_total{"))
        .filter(|l| l.contains("grpc_method=\"GetSupervisorPoolStatus\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_status_watch_shows_a_takeover_as_it_happens_and_survives_a_gateway_kill() -> TestResult
{
    let mut cluster = Cluster::start_each(
        3,
        &["--tick-interval-ms", "100", "--heartbeat-ttl-ms", "1500"],
        |_| vec!["--http-listen".into(), format!("127.0.0.1:{}", free_port())],
    );
    cluster.wait_leader("bootstrap").await;
    let addrs: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let endpoints = addrs.join(",");
    let members: Vec<ScriptedMember> = (0..2)
        .map(|i| {
            let mut gateways = addrs.clone();
            gateways.rotate_left(i + 1);
            ScriptedMember::start(&format!("m{}", i + 1), 1, 4, gateways, Duration::ZERO)
        })
        .collect();

    eprintln!("--- step: pool status --watch, then a sandbox w1");
    let watching = Watching::start(&endpoints, &["pool", "status"])?;
    watching.until("the whole pool first", Duration::from_secs(20), |d| {
        d["members"].as_array().is_some_and(|m| m.len() == 2)
    });
    let (code, _, err) = pool(&endpoints, &["sandbox", "create", "--id", "w1"]);
    assert_eq!(code, 0, "sandbox create: {err}");
    let before = watching.until("w1 assigned", Duration::from_secs(20), |d| {
        owner(d, "w1").is_some()
    });
    let first = owner(&before, "w1").ok_or("no owner")?;

    eprintln!("--- step: the owner of w1, {first}, stops");
    let stopped = Instant::now();
    members
        .iter()
        .find(|m| m.member == first)
        .ok_or("owner is no scripted member")?
        .stop();
    let after = watching.until("w1 taken over", Duration::from_secs(30), |d| {
        owner(d, "w1").is_some_and(|o| o != first)
    });
    eprintln!(
        "--- step: the watch showed w1 owned by {} {:?} after {first} stopped (TTL 1.5 s)",
        owner(&after, "w1").unwrap_or_default(),
        stopped.elapsed()
    );
    for node in &cluster.nodes {
        assert_eq!(
            status_calls(node).await?,
            0,
            "gateway {} served GetSupervisorPoolStatus: the watch polled",
            node.id
        );
    }

    eprintln!("--- step: kill -9 gateway 1 (the watch's first endpoint), create w2");
    cluster.node(1).kill9();
    let survivors = addrs[1..].join(",");
    let created = (0..40).any(|_| {
        let (code, _, _) = pool(&survivors, &["sandbox", "create", "--id", "w2"]);
        code == 0 || {
            std::thread::sleep(Duration::from_millis(250));
            false
        }
    });
    assert!(created, "w2 could not be created through gateways 2 and 3");
    watching.until("w2 listed after the kill", Duration::from_secs(30), |d| {
        owner(d, "w2").is_some()
    });
    let stderr = watching.stop();
    assert!(
        stderr.contains("watching again"),
        "the CLI said nothing of the broken watch: {stderr}"
    );

    eprintln!("--- step: sandbox list --watch -o json");
    let listing = Watching::start(&survivors, &["sandbox", "list"])?;
    let list = listing.until("the sandboxes", Duration::from_secs(20), |d| {
        d.as_array()
            .is_some_and(|a| a.iter().any(|s| s["id"] == "w2"))
    });
    assert!(list
        .as_array()
        .is_some_and(|a| a.iter().any(|s| s["id"] == "w1")));
    listing.stop();
    drop(members);
    Ok(())
}
