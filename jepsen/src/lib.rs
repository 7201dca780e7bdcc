//! `openshell-jepsen`: a partition-testing harness for the raft-replicated
//! gateway store, in the manner of Jepsen.
//!
//! Real `openshell-gateway` processes run in their own network namespaces,
//! joined by a bridge in a switch namespace; clients in the harness issue
//! register operations through random nodes while a nemesis cuts, isolates,
//! drops, kills, pauses, skews clocks and changes membership. The history is
//! written as Jepsen-style JSON Lines and checked for linearizability, lost
//! acknowledged writes and replica convergence.
//!
//! # Layout
//! - [`net`]: namespaces, bridge, veths; `cut`/`isolate`/`drop`/`recover`;
//!   cleanup of everything named `osj-*`.
//! - [`cluster`]: gateway processes (start, `kill -9`, pause, clock offset,
//!   wipe) and gRPC clients to them.
//! - [`security`]: the run's CA, gateway certificates, signing key, admin
//!   token, trusted grant keys and per-member credentials; the token
//!   interceptor; the transport probe.
//! - [`nemesis`]: the fault schedule drawn from the seed (`power_cut`: the
//!   power-loss nemesis).
//! - [`power`]: power-loss settings, the nodes' lazyfs mounts, counters.
//! - [`workload`]: the register workload and the pool workload (sandboxes,
//!   pool faults).
//! - [`members`]: the pool workload's members: `openshell-supervisor`
//!   processes or scripted supervisors.
//! - [`history`]: the JSONL history (HISTORY.md).
//! - [`ops`]: the typed values of each workload's events.
//! - [`checker`]: linearizability (WGL), acknowledged writes, one resource
//!   version per write, replica convergence, the pool invariants I1–I8 and
//!   state digests; [`digest_sample`]: sampling every replica's digest at
//!   one applied index.
//! - [`report`]: `results.json` and `index.html`.
//! - [`recovery`]: per fault, the time until writes through the majority
//!   side succeed again after it starts and after it heals.
//! - [`lag`]: every node's view sampled through the run; per healed fault,
//!   how long until the replicas agreed on a leader and caught up.
//! - [`run`]: one run end to end; [`matrix`]: every nemesis in turn.
//!
//! Child processes (gateways, supervisors) are `local_cluster::process`'s,
//! started in the run's namespaces through its `in_namespace` hook.
//!
//! The benchmarks, the soak and the scale run use [`cluster`],
//! [`security`], [`net`] and [`run::preflight`] from their own crate,
//! `openshell-bench` (tools/bench).
//!
//! # Example: check a history file
//!
//! ```no_run
//! use jepsen::checker::linear;
//! let events = jepsen::history::read_jsonl(std::path::Path::new("history.jsonl"))?;
//! for key in linear::check(&events, linear::Options::default())? {
//!     println!("{} {:?}", key.key, key.verdict);
//! }
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod checker;
pub mod cluster;
pub mod digest_sample;
pub mod history;
pub mod lag;
pub mod matrix;
pub mod members;
pub mod nemesis;
pub mod net;
pub mod ops;
pub mod power;
pub mod recovery;
pub mod report;
pub mod run;
pub mod security;
pub mod security_probe;
pub mod workload;

/// The files of `dir` whose names end in `suffix`, as (name without the
/// suffix, path); none when `dir` cannot be read (it may not exist yet).
pub(crate) fn files_with_suffix(
    dir: &std::path::Path,
    suffix: &str,
) -> Vec<(String, std::path::PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(suffix)?.to_string();
            Some((stem, entry.path()))
        })
        .collect()
}
