//! t41: the scale run, test-sized (issue 17 "Scale"): every step runs on
//! real processes and the report has its shape. No timing is asserted
//! (the figures are the command's, on release binaries: docs/benchmarks.md
//! "Scale").
//!
//! - given: 3 gateways in their own network namespaces (TLS, default
//!   timing, `/readyz` and `/metrics` served), 10 scripted members with
//!   credentials
//! - when: member 0 attaches alone and gets 20 sandboxes, the others
//!   attach and 180 more are created, one more, member 0 is killed, a
//!   follower and then the leader are `kill -9`ed and started
//! - then: every sandbox was shown acknowledged on its owner's stream,
//!   every one of the killed member's sandboxes was acknowledged by a new
//!   owner, both restarted gateways answered `/readyz` 200, every figure of
//!   the report is present (RSS of 3 gateways, push passes counted), the
//!   coordinator's steps are counted and its takeover step read member
//!   0's sandboxes, the JSON written reads back equal, and nothing named
//!   osj-* is left

use std::time::Duration;

use bench::scale::{ScaleOptions, ScaleReport};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scale_step_runs_and_the_report_has_its_shape() {
    if testkit::skip_without_root("bench::t41_scale_smoke") {
        return;
    }
    eprintln!("--- step: find the gateway binary");
    let bin = testkit::bins::gateway_bin();
    let out = testkit::bins::profile_dir()
        .join("jepsen-runs")
        .join("t41-scale");
    let _ = std::fs::remove_dir_all(&out);
    let json = out.join("copy").join("scale.json");
    let options = ScaleOptions {
        nodes: 3,
        members: 10,
        sandboxes: 200,
        capacity: 60,
        concurrency: 8,
        takeover_size: 20,
        quiet: Duration::from_secs(2),
        gateway_bin: bin,
        out: out.clone(),
        json: Some(json.clone()),
        step_timeout: Duration::from_secs(120),
        // Through the gateways' config file, at this machine's default.
        gateway_worker_threads: Some(2),
        member_pings: testkit::member::Pings::AsSupervisor,
        // 10 members over the run's extra addresses, as the command's
        // default: each dials from its own.
        member_many_addresses: true,
    };
    eprintln!("--- step: 10 members, 200 sandboxes, a takeover, two restarts");
    let report = bench::scale::run(options)
        .await
        .unwrap_or_else(|e| panic!("the scale run could not be carried out: {e:#}"));
    eprintln!("{}", report.table());
    assert!(
        jepsen::net::stale_leftovers().is_empty(),
        "the scale run left osj-* namespaces or links behind"
    );

    eprintln!("--- step: convergence");
    assert_eq!(report.attached, 10);
    let k = &report.takeover;
    assert_eq!(
        (k.member.as_str(), k.sandboxes),
        ("sc000", 20),
        "member 0 holds the 20 sandboxes created while it was alone: {k:?}"
    );
    assert_eq!(k.acknowledged, k.sandboxes, "{k:?}");
    assert!(k.seconds.is_some() && k.first_seconds.is_some(), "{k:?}");
    let roles: Vec<&str> = report.restarts.iter().map(|r| r.role.as_str()).collect();
    assert_eq!(roles, ["follower", "leader"]);
    for r in &report.restarts {
        assert!(
            r.seconds.is_some(),
            "n{} never answered /readyz 200",
            r.node
        );
        assert!(r.rss_mib > 0.0, "{r:?}");
    }

    eprintln!("--- step: the report's shape");
    assert_eq!(report.rss_mib.len(), 3);
    assert!(
        report.rss_mib.iter().all(|m| *m > 0.0),
        "{:?}",
        report.rss_mib
    );
    assert_eq!(report.rss_end_mib.len(), 3);
    assert_eq!(report.quiet_cpu_s.len(), 3);
    // Every gateway's attached supervisors, read at the window's start and
    // end: at most the 10 members in all (one may be between gateways).
    assert_eq!(
        report.quiet_attached.len(),
        3,
        "{:?}",
        report.quiet_attached
    );
    type Attached = (Option<u64>, Option<u64>);
    let ends: [fn(&Attached) -> Option<u64>; 2] = [|p| p.0, |p| p.1];
    for at in ends {
        let counts: Option<Vec<u64>> = report.quiet_attached.iter().map(at).collect();
        let counts = counts.unwrap_or_else(|| panic!("unreadable: {:?}", report.quiet_attached));
        let total: u64 = counts.iter().sum();
        assert!((1..=10).contains(&total), "{:?}", report.quiet_attached);
    }
    // Every gateway's send-away counter and the raft term are read: the
    // term is at least the first election's.
    assert_eq!(report.sent_away.len(), 3, "{:?}", report.sent_away);
    assert!(
        report.sent_away.iter().all(Option::is_some),
        "unreadable: {:?}",
        report.sent_away
    );
    assert!(
        report.quiet_end_term.is_some_and(|t| t >= 1),
        "{:?}",
        report.quiet_end_term
    );
    // At the end: the term, every gateway's send-aways, and the takeovers
    // of the gateway never restarted, at least the killed member's.
    assert!(report.end.term.is_some_and(|t| t >= 2), "{:?}", report.end);
    assert_eq!(report.end.sent_away.len(), 3, "{:?}", report.end);
    // Every gateway's heartbeat commands by outcome are read; members
    // attached, so some gateway wrote some.
    assert_eq!(report.end.heartbeats.len(), 3, "{:?}", report.end);
    assert!(
        report
            .end
            .heartbeats
            .iter()
            .all(|outcomes| outcomes.contains_key("written") && outcomes.len() == 6),
        "{:?}",
        report.end
    );
    assert!(
        report
            .end
            .heartbeats
            .iter()
            .any(|outcomes| outcomes.get("written").is_some_and(|n| *n > 0)),
        "{:?}",
        report.end
    );
    assert!(
        (1..=3).contains(&report.end.takeovers_node),
        "{:?}",
        report.end
    );
    assert!(
        report
            .end
            .takeovers
            .is_some_and(|t| t >= report.takeover.sandboxes as u64),
        "{:?}",
        report.end
    );
    assert!(report.push_bulk.passes > 0 && report.push_bulk.examined > 0);
    assert!(report.push_one.passes > 0, "{:?}", report.push_one);
    assert_eq!(report.push_bulk.full_scan_per_pass, 200);
    assert_eq!(report.created, 180);
    assert_eq!(report.create_cpu_s.len(), 3);
    assert!((1..=3).contains(&report.quiet_leader), "{report:?}");
    assert!(
        report.coordinator_quiet.passes > 0,
        "the leader steps on its ticks: {:?}",
        report.coordinator_quiet
    );
    assert!(
        report.coordinator_takeover.examined >= 20,
        "the takeover step reads member 0's sandboxes: {:?}",
        report.coordinator_takeover
    );
    assert!(
        report.takeover_commands_per_entry >= 1.0,
        "{}",
        report.takeover_commands_per_entry
    );
    assert_eq!(report.snapshots.size_bytes.len(), 3);
    assert!(!report.load_before.is_empty() && !report.load_after.is_empty());
    for path in [out.join("scale.json"), json] {
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let back: ScaleReport =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // serde_json reads a float back to within an ulp, not always to
        // the same bits: compare the two as JSON with a float tolerance.
        let written = serde_json::to_value(&report).unwrap_or_default();
        let read = serde_json::to_value(&back).unwrap_or_default();
        assert!(
            same_json(&written, &read),
            "{}: {read} != {written}",
            path.display()
        );
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        for key in [
            "settings",
            "rss_mib",
            "takeover",
            "restarts",
            "push_bulk",
            "push_quiet",
            "push_one",
            "push_takeover",
            "quiet_cpu_s",
            "quiet_attached",
            "sent_away",
            "quiet_end_term",
            "end",
            "coordinator_quiet",
            "coordinator_takeover",
            "snapshots",
        ] {
            assert!(value.get(key).is_some(), "no {key} in {}", path.display());
        }
    }
}

/// Whether `a` and `b` are the same JSON, numbers equal to within 1e-9
/// relative.
fn same_json(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}
