//! `openshell-jepsen matrix`: the chosen workload (`--workload register` or
//! `pool`) under every nemesis in turn (one run each, same seed), then a
//! markdown table of the results.

use std::path::{Path, PathBuf};

use crate::nemesis::Fault;
use crate::run::{run, RunOptions};

/// One matrix row.
#[derive(Clone, Debug)]
pub struct Row {
    /// Nemesis set name.
    pub name: String,
    /// Run directory.
    pub dir: PathBuf,
    /// Verdict per checker (`name=valid|invalid|unknown`), or the error.
    pub verdict: String,
    /// Ops by outcome.
    pub ops: String,
}

/// The nemesis sets of the matrix: each fault alone, then all combined.
pub fn sets() -> Vec<(String, Vec<Fault>)> {
    let mut v: Vec<(String, Vec<Fault>)> = Fault::ALL
        .iter()
        .map(|f| (f.name().to_string(), vec![*f]))
        .collect();
    v.push(("all-combined".into(), Fault::ALL.to_vec()));
    v
}

/// Runs every set with `base` options, each into `root/<set>`.
pub async fn run_matrix(base: &RunOptions, root: &Path, only: &[String]) -> Vec<Row> {
    let mut rows = Vec::new();
    for (name, faults) in sets() {
        if !only.is_empty() && !only.contains(&name) {
            continue;
        }
        let mut options = base.clone();
        options.faults = faults.clone();
        options.schedule.combine = faults.len() > 1;
        options.out = root.join(&name);
        eprintln!(
            "matrix: {name} for {:?} into {}",
            options.duration,
            options.out.display()
        );
        let row = match run(options.clone()).await {
            Ok(outcome) => {
                let verdict = outcome
                    .results
                    .iter()
                    .map(|r| format!("{}={:?}", r.checker, r.valid).to_lowercase())
                    .collect::<Vec<_>>()
                    .join(", ");
                let ops = std::fs::read_to_string(outcome.dir.join("results.json"))
                    .ok()
                    .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                    .map(|v| v["stats"].to_string())
                    .unwrap_or_default();
                Row {
                    name,
                    dir: outcome.dir,
                    verdict,
                    ops,
                }
            }
            Err(e) => Row {
                name,
                dir: options.out,
                verdict: format!("error: {e:#}"),
                ops: String::new(),
            },
        };
        eprintln!("matrix: {} -> {}", row.name, row.verdict);
        rows.push(row);
    }
    rows
}

/// The results as a markdown table.
pub fn table(rows: &[Row], base: &RunOptions) -> String {
    let mut out = format!(
        "{} workload, {} nodes, {} s per nemesis, seed {}, concurrency {}.\n\n| nemesis | result | ops | run dir |\n| --- | --- | --- | --- |\n",
        base.workload,
        base.nodes,
        base.duration.as_secs(),
        base.seed,
        base.register.concurrency
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | `{}` | {} |\n",
            r.name,
            r.verdict,
            r.ops,
            r.dir.display()
        ));
    }
    out
}
