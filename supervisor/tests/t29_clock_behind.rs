//! Scenario 10 (issue 11, point 5): a supervisor restarted with its clock an
//! hour behind (an NTP step, a new host) re-joins and serves. The pool
//! orders incarnations by its log, so no supervisor's clock decides whether
//! its process is newer (docs/design/0002).
//!
//! - given: three gateways, supervisor s1 serving a demo sandbox
//! - when: s1 is killed and restarted under libfaketime with its wall clock
//!   one hour behind (monotonic time untouched)
//! - then: it re-joins (`/readyz` 200) as a newer incarnation, takes its
//!   sandbox back over, and a new sandbox gets assigned to it, runs and
//!   execs through it (its log's timestamps show the fake clock was in
//!   effect).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proto::pool_types::{MemberState, SandboxPhase};
use testkit::gateway::eventually;
use testkit::supervisor::*;
use testkit::TestResult;

/// libfaketime, as Debian/Ubuntu's `faketime` package installs it.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_restarted_with_its_clock_an_hour_behind_rejoins_and_serves() -> TestResult {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install -y faketime (or bash jepsen/ci-deps.sh)"
    );
    let (cluster, gateways, _cleanup) = three_gateways(&timing(FAST_TIMING)).await;
    let mut s1 = Supervisor::new("s1", gateways, cluster.root.path());
    s1.start();
    wait_member(&cluster, "s1", "active").await;
    let before = running_sandbox(&cluster, "sb-0").await;
    assert_eq!(before.owner, "s1");
    let (counter, by) = read_counter(&cluster, "sb-0").await?;
    assert_eq!(by, "s1");
    let old_incarnation = member(&pool_status(&cluster).await?, "s1")
        .ok_or("s1 missing")?
        .incarnation;

    eprintln!("--- step: kill -9 s1; restart it with its clock an hour behind");
    s1.kill9();
    s1.env = vec![
        ("LD_PRELOAD".into(), LIBFAKETIME.into()),
        ("FAKETIME".into(), "-1h".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ];
    s1.start();

    eprintln!("--- step: it re-joins: /readyz 200, a newer incarnation");
    let ready = eventually("s1 ready again", || async {
        let (code, body) = s1.readyz().await;
        if code == 200 {
            Ok(body)
        } else {
            Err(format!("/readyz {code}: {body}").into())
        }
    })
    .await;
    eprintln!("s1 /readyz: {ready}");
    let rejoined = wait_pool(
        &cluster,
        "s1 active as a newer incarnation",
        Duration::from_secs(20),
        |s| {
            member(s, "s1").is_some_and(|m| {
                m.state() == MemberState::Active && m.incarnation > old_incarnation
            })
        },
    )
    .await;
    let new_incarnation = member(&rejoined, "s1").ok_or("s1 missing")?.incarnation;

    eprintln!("--- step: it takes its sandbox back over; the workload is untouched");
    let after = wait_pool(
        &cluster,
        "sb-0 re-supervised by the new incarnation",
        Duration::from_secs(30),
        |s| {
            sandbox(s, "sb-0").is_some_and(|sb| {
                sb.owner == "s1"
                    && sb.owner_incarnation == new_incarnation
                    && sb.phase() == SandboxPhase::Assigned
                    && sb.acknowledged
                    && sb.last_report_index > before.last_report_index
                    // The first report of a new session may precede the
                    // workload facts; wait for one that carries them.
                    && sb.pid != 0
            })
        },
    )
    .await;
    let sb0 = sandbox(&after, "sb-0").ok_or("sb-0 missing")?;
    assert_eq!((sb0.pid, sb0.generation), (before.pid, before.generation));
    let (_, by) = read_counter_above(&cluster, "sb-0", counter).await?;
    assert_eq!(by, "s1");

    eprintln!("--- step: a new sandbox is assigned to it, runs and execs");
    let sb1 = running_sandbox(&cluster, "sb-1").await;
    assert_eq!(
        (sb1.owner.as_str(), sb1.owner_incarnation),
        ("s1", new_incarnation)
    );
    let (_, by) = read_counter(&cluster, "sb-1").await?;
    assert_eq!(by, "s1");

    eprintln!("--- step: the restarted supervisor's clock really was an hour behind");
    let log = s1.log();
    let started = log
        .lines()
        .rfind(|l| l.contains("supervisor starting"))
        .and_then(|l| l.split_whitespace().next())
        .ok_or("no start line in the supervisor log")?;
    let behind_ms = now_ms().saturating_sub(unix_ms_of(started)?);
    assert!(
        behind_ms > 50 * 60 * 1000,
        "the restarted supervisor logged its start at {started}, only {behind_ms} ms behind"
    );
    Ok(())
}

/// Milliseconds since the Unix epoch of an RFC 3339 timestamp (via
/// `date`, to keep the harness free of a date library).
fn unix_ms_of(timestamp: &str) -> TestResult<u64> {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", timestamp, "+%s%3N"])
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}
