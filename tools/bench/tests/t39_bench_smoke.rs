//! t39: the comparative benchmark, test-sized (issue 17): every system the
//! machine has runs at every concurrency, completes writes and never has a
//! compare-and-set refused (each client owns its keys, so a conflict would
//! mean the bench lost track of a version).
//!
//! - given: the file limit, the in-process raft group, and, when their
//!   binaries are installed (`scripts/bench.sh` installs them), PostgreSQL
//!   15, a 3-member etcd and 3 debug gateways
//! - when: `openshell-bench compare` runs once over 200 keys at 1 and 4
//!   clients, 0.3 s warm-up + 1 s per level
//! - then: `run-1.json` has every system that ran x both concurrencies with
//!   writes completed and zero CAS conflicts; `summary.json`, `summary.md`
//!   and the SVG exist. No timing assertions.

use bench::compare::report::Run;
use bench::compare::BenchArgs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_system_completes_writes_without_cas_conflicts() {
    eprintln!("--- step: find the gateway binary");
    let gateway_bin = testkit::bins::gateway_bin();
    let dir = tempfile::tempdir().expect("tempdir");
    let args = BenchArgs {
        runs: 1,
        out: dir.path().join("compare"),
        plot: dir.path().join("compare.svg"),
        keys: 200,
        clients: vec![1, 4],
        warmup_secs: 0.3,
        secs: 1.0,
        systems: bench::compare::SYSTEMS
            .iter()
            .map(|s| s.to_string())
            .collect(),
        skip_missing: false,
        gateway_bin: Some(gateway_bin),
        pg_bin_dir: bench::compare::postgres::DEFAULT_BIN_DIR.into(),
        etcd_bin: bench::compare::etcd::DEFAULT_BIN.into(),
        work_dir: Some(dir.path().join("work")),
    };
    let mut expected = Vec::new();
    for s in bench::compare::SYSTEMS {
        match args.missing(s) {
            Some(why) => eprintln!("skipping {why}"),
            None => expected.push(s.to_string()),
        }
    }
    let args = BenchArgs {
        systems: expected.clone(),
        ..args
    };
    eprintln!("--- step: run the bench over {expected:?}");
    bench::compare::run(&args)
        .await
        .unwrap_or_else(|e| panic!("the bench could not be carried out: {e:#}"));

    eprintln!("--- step: check run-1.json");
    let text = std::fs::read_to_string(args.out.join("run-1.json")).expect("run-1.json");
    let run: Run = serde_json::from_str(&text).expect("run-1.json parses");
    for system in &expected {
        let levels = run
            .systems
            .get(system)
            .unwrap_or_else(|| panic!("{system} missing from run-1.json"));
        for clients in [1, 4] {
            let level = levels
                .iter()
                .find(|l| l.clients == clients)
                .unwrap_or_else(|| panic!("{system} has no level at {clients} clients"));
            assert!(
                level.ops > 0,
                "{system} at {clients} clients completed no write: {level:?}"
            );
            assert_eq!(
                level.conflicts, 0,
                "{system} at {clients} clients had CAS conflicts: {level:?}"
            );
        }
    }
    for f in ["summary.json", "summary.md"] {
        assert!(args.out.join(f).is_file(), "{f} missing");
    }
    let svg = std::fs::read_to_string(&args.plot).expect("the plot");
    assert!(
        svg.contains("throughput"),
        "no throughput panel in the plot"
    );
}
