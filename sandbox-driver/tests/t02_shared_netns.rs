//! Scenario: the process driver runs every runtime in one existing network
//! namespace (`with_shared_netns`, what the Jepsen harness does with its
//! members namespace) instead of a namespace each.
//!
//! - given: a namespace made by the test (`ip netns add`), joined to the
//!   test's own namespace by a veth pair over a /30 of `10.215.0.0/16`
//! - when: `ensure` two sandbox generations through a driver given that
//!   namespace and the namespace side's address
//! - then: both are Running at `<that address>:<a port each bound>`
//!   (different ports), both processes are in that namespace (`ip netns
//!   pids`), no namespace of their own was made and no `netns` file
//!   written; `delete` stops the process and leaves the shared namespace
//! - and: a namespace that does not exist refuses the driver, naming it
//!
//! The test removes its processes and namespace on the way out ([`Shared`]).

use std::path::Path;
use std::time::{Duration, Instant};

mod common;

use common::{spec, Shared};
use sandbox_driver::process::{NetnsMode, ProcessConfig, ProcessDriver, SharedNetns};
use sandbox_driver::{Endpoint, LaunchSpec, RuntimeState, SandboxDriver};

/// `ensure` until Running, at most 60 s.
async fn ensure_running(driver: &ProcessDriver, spec: &LaunchSpec) -> Endpoint {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        match driver.ensure(spec).await.expect("ensure") {
            RuntimeState::Running(endpoint) => return endpoint,
            RuntimeState::Pending { .. } if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => {
                let log =
                    std::fs::read_to_string(driver.dir().join(spec.name()).join("runtime.log"))
                        .unwrap_or_default();
                panic!("{} is {other:?}; runtime.log:\n{log}", spec.name());
            }
        }
    }
}

fn read_pid(entry: &Path) -> i32 {
    std::fs::read_to_string(entry.join("pid"))
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {}", entry.display()))
}

#[tokio::test]
async fn runtimes_join_the_shared_namespace_and_leave_it_in_place() {
    if !testkit::is_root() {
        eprintln!("skipping t02: needs root (ip netns)");
        return;
    }
    eprintln!("--- step: a namespace of our own, routable from here");
    let (shared, ns_ip) = Shared::new("t02", 0);
    let driver = shared.driver(ns_ip);
    assert!(
        !driver.uses_netns(),
        "a shared namespace replaces per-runtime ones"
    );

    eprintln!("--- step: two runtimes in it");
    let id = |tag: &str| format!("t02-{}-{tag}", std::process::id());
    let (a, b) = (spec("t02", &id("a")), spec("t02", &id("b")));
    let ea = ensure_running(&driver, &a).await;
    let eb = ensure_running(&driver, &b).await;
    for e in [&ea, &eb] {
        assert!(
            e.address.starts_with(&format!("{ns_ip}:")),
            "{} listens on {}, not in the shared namespace {ns_ip}",
            e.name,
            e.address
        );
    }
    assert_ne!(ea.address, eb.address, "each runtime binds its own port");
    let entry_a = driver.dir().join(a.name());
    let entry_b = driver.dir().join(b.name());
    let in_ns = shared.pids();
    for entry in [&entry_a, &entry_b] {
        let pid = read_pid(entry);
        assert!(
            in_ns.contains(&pid),
            "runtime {pid} is not in {}: {in_ns:?}",
            shared.name
        );
        assert!(
            !entry.join("netns").exists(),
            "a runtime in the shared namespace records no namespace of its own"
        );
    }
    let namespaces = String::from_utf8_lossy(
        &std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .expect("ip netns list")
            .stdout,
    )
    .into_owned();
    assert!(
        !namespaces.contains(&a.name()) && !namespaces.contains(&b.name()),
        "no per-runtime namespace: {namespaces}"
    );

    eprintln!("--- step: delete one; the other and the namespace stay");
    let pid_a = read_pid(&entry_a);
    driver.delete(&a.name()).await.expect("delete");
    assert!(!entry_a.exists(), "the entry is removed");
    assert!(
        !shared.pids().contains(&pid_a),
        "the deleted runtime still runs"
    );
    assert!(
        Path::new("/run/netns").join(&shared.name).exists(),
        "delete removed the shared namespace"
    );
    assert!(matches!(
        driver.ensure(&b).await.expect("ensure"),
        RuntimeState::Running(_)
    ));
    driver.delete(&b.name()).await.expect("delete");

    eprintln!("--- step: a namespace that does not exist is refused");
    let e = ProcessDriver::new(ProcessConfig {
        dir: shared.dir.path().join("driver2"),
        runtime_bin: testkit::bins::runtime_bin(),
        netns: NetnsMode::Off,
    })
    .expect("driver")
    .with_shared_netns(SharedNetns {
        name: "t02-no-such-namespace".into(),
        ip: ns_ip,
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(e.contains("t02-no-such-namespace"), "{e}");
}
