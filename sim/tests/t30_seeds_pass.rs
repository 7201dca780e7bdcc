//! The scenario passes its checks for a range of seeds: under each seed's
//! swarm of faults, the register history is linearizable, writes resume
//! through every node after healing, and all replicas reach the same state
//! at the same applied index.
//!
//! - given: seeds 0..`SIM_SEEDS` (default 20; `scripts/test.sh` 1,000)
//! - when: they run in as many `sim` processes as the machine has cores
//!   (one simulation at a time per process: tokio's task ids are
//!   process-wide), each a contiguous range
//! - then: none fails; a failure prints the seed's trace tail and the
//!   command that replays it

use std::process::{Command, Stdio};

#[test]
fn the_scenario_holds_for_every_seed() {
    let seeds = sim::seed_budget(20).expect("SIM_SEEDS");
    let processes = std::thread::available_parallelism()
        .map(|n| n.get() as u64)
        .unwrap_or(1)
        .clamp(1, 4)
        .min(seeds.max(1));
    let per = seeds.div_ceil(processes);
    let mut children = Vec::new();
    let mut first = 0;
    while first < seeds {
        let count = per.min(seeds - first);
        let child = Command::new(env!("CARGO_BIN_EXE_sim"))
            .args(["--seed", &first.to_string(), "--count", &count.to_string()])
            .arg("--quiet")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the sim binary");
        children.push((first, count, child));
        first += count;
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    for (first, count, child) in children {
        let output = child.wait_with_output().expect("wait for the sim binary");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let summary = stdout.lines().last().unwrap_or("");
        println!("seeds {first}..{}: {summary}", first + count);
        assert!(
            summary.starts_with(&format!("{count} seeds in ")),
            "seeds {first}..{}: no summary line from the sim binary:\n{stdout}",
            first + count
        );
        ran += count;
        if !output.status.success() {
            failures.push(stdout.into_owned());
        }
    }
    assert_eq!(ran, seeds, "every seed ran");
    assert!(
        failures.is_empty(),
        "seeds failed:\n{}",
        failures.join("\n\n")
    );
}
