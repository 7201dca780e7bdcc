//! `openshell-jepsen matrix`: the chosen workload (`--workload register` or
//! `pool`) under every nemesis in turn (one run each, same seed), then a
//! markdown table of the results; `openshell-jepsen table DIR` renders the
//! same table again from a matrix directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::history::Event;
use crate::nemesis::Fault;
use crate::run::{run, RunOptions};

/// One matrix row, as read back from its run directory.
#[derive(Clone, Debug)]
pub struct Row {
    /// Nemesis set name.
    pub name: String,
    /// Run directory.
    pub dir: PathBuf,
    /// Nemesis events, and how many of each kind (heals left out).
    pub faults: String,
    /// Operations by `f`: ok/fail/info.
    pub ops: String,
    /// Checkers valid / checkers run.
    pub checkers: (usize, usize),
    /// How long followers stayed behind after a heal ([`crate::lag`]): the
    /// longest, and how many heals they never caught up after in time.
    pub lag: String,
    /// `valid`, or every checker that was not valid with its verdict, or
    /// why the row has no results.
    pub verdict: String,
}

impl Row {
    /// Every checker said valid.
    pub fn is_valid(&self) -> bool {
        self.verdict == "valid"
    }
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
            Ok(outcome) => read_row(&name, &outcome.dir),
            Err(e) => Row {
                name: name.clone(),
                dir: options.out,
                faults: String::new(),
                ops: String::new(),
                checkers: (0, 0),
                lag: String::new(),
                verdict: format!("error: {e:#}"),
            },
        };
        eprintln!("matrix: {} -> {}", row.name, row.verdict);
        rows.push(row);
    }
    rows
}

/// The rows of a matrix directory (`root/<set>/results.json` and
/// `history.jsonl`), in matrix order; sets without results are left out.
pub fn read_rows(root: &Path) -> Vec<Row> {
    sets()
        .into_iter()
        .map(|(name, _)| (root.join(&name), name))
        .filter(|(dir, _)| dir.join("results.json").is_file())
        .map(|(dir, name)| read_row(&name, &dir))
        .collect()
}

/// One row from its run directory.
pub fn read_row(name: &str, dir: &Path) -> Row {
    let mut row = Row {
        name: name.to_string(),
        dir: dir.to_path_buf(),
        faults: String::new(),
        ops: String::new(),
        checkers: (0, 0),
        lag: String::new(),
        verdict: String::new(),
    };
    let results = std::fs::read_to_string(dir.join("results.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    let Some(results) = results else {
        row.verdict = format!("no readable {}/results.json", dir.display());
        return row;
    };
    let checkers = results["checkers"].as_array().cloned().unwrap_or_default();
    let mut not_valid = Vec::new();
    for c in &checkers {
        let verdict = c["valid"].as_str().unwrap_or("?");
        if verdict == "valid" {
            row.checkers.0 += 1;
        } else {
            not_valid.push(format!(
                "{}={verdict}",
                c["checker"].as_str().unwrap_or("?")
            ));
        }
    }
    row.checkers.1 = checkers.len();
    row.verdict = if not_valid.is_empty() && !checkers.is_empty() {
        "valid".into()
    } else if checkers.is_empty() {
        "no checkers ran".into()
    } else {
        not_valid.join(", ")
    };
    let mut ops = Vec::new();
    if let Some(stats) = results["stats"].as_object() {
        for (f, by) in stats.iter().filter(|(f, _)| f.as_str() != "nemesis") {
            let n = |t: &str| by[t].as_u64().unwrap_or(0);
            ops.push(format!("{f} {}/{}/{}", n("ok"), n("fail"), n("info")));
        }
    }
    row.ops = ops.join("; ");
    row.lag = lag_summary(&results["lag"]["all"]);
    let events = crate::history::read_jsonl(&dir.join("history.jsonl")).unwrap_or_default();
    row.faults = fault_summary(&events);
    row
}

/// `max 1.20 s` (and `, 2 never` when followers were still behind after
/// some heal when the next fault started), from `results.json`'s
/// `lag.all`; `-` when there is none (an older run, no healed fault).
fn lag_summary(all: &serde_json::Value) -> String {
    let never = all["never"].as_u64().unwrap_or(0);
    match (all["max_s"].as_f64(), never) {
        (None, 0) => "-".into(),
        (None, n) => format!("{n} never"),
        (Some(max), 0) => format!("max {max:.2} s"),
        (Some(max), n) => format!("max {max:.2} s, {n} never"),
    }
}

/// `N (kind n, ...)`: nemesis events, by kind, heals left out of the list.
fn fault_summary(events: &[Event]) -> String {
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let mut total = 0;
    for e in events
        .iter()
        .filter(|e| matches!(e.process, crate::history::Process::Nemesis))
    {
        total += 1;
        if e.f != "recover" {
            *kinds.entry(e.f.as_str()).or_default() += 1;
        }
    }
    let list: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!("{total} ({})", list.join(", "))
}

/// The rows as a markdown table, under a line naming the settings (`base`,
/// when the rows were just run).
pub fn table(rows: &[Row], base: Option<&RunOptions>) -> String {
    let mut out = String::new();
    if let Some(base) = base {
        out.push_str(&format!(
            "{} workload, {} nodes, {} s per nemesis, seed {}, {}.\n\n",
            base.workload,
            base.nodes,
            base.duration.as_secs(),
            base.seed,
            match base.security {
                crate::security::Security::Tls => "TLS",
                crate::security::Security::Insecure => "--insecure (plaintext)",
            },
        ));
    }
    out.push_str("| nemesis | nemesis events | operations ok/fail/info | followers behind after a heal | checkers | verdict |\n| --- | --- | --- | --- | --- | --- |\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {}/{} valid | **{}** |\n",
            r.name, r.faults, r.ops, r.lag, r.checkers.0, r.checkers.1, r.verdict
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_row(root: &Path, name: &str, verdicts: &[(&str, &str)]) {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let checkers: Vec<serde_json::Value> = verdicts
            .iter()
            .map(|(c, v)| serde_json::json!({"checker": c, "valid": v}))
            .collect();
        let results = serde_json::json!({
            "checkers": checkers,
            "stats": {"read": {"ok": 5, "fail": 1}, "nemesis": {"events": 2}},
            "lag": {"all": {"count": 1, "never": 0, "max_s": 0.4, "p50_s": 0.4}},
        });
        std::fs::write(dir.join("results.json"), results.to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        let history = [
            r#"{"index":0,"type":"info","process":"nemesis","f":"kill","value":"n1","time":1}"#,
            r#"{"index":1,"type":"info","process":"nemesis","f":"recover","value":"healed","time":2}"#,
        ]
        .join("\n");
        std::fs::write(dir.join("history.jsonl"), history).unwrap_or_else(|e| panic!("{e}"));
    }

    /// The row the docs publish combines every fault, packet loss and
    /// clock bumps included (issue 33's stuck follower came after both).
    #[test]
    fn all_combined_has_every_fault_drop_and_clock_bump_included() {
        let sets = sets();
        let (name, faults) = sets.last().expect("sets");
        assert_eq!(name, "all-combined");
        assert_eq!(faults.as_slice(), Fault::ALL.as_slice());
        assert!(faults.contains(&Fault::Drop) && faults.contains(&Fault::ClockBump));
    }

    #[test]
    fn rows_are_read_back_in_matrix_order_with_every_non_valid_checker_named() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        write_row(root.path(), "kill", &[("linearizable", "valid")]);
        write_row(
            root.path(),
            "isolate",
            &[
                ("linearizable", "invalid"),
                ("replicas-identical", "unknown"),
            ],
        );
        let rows = read_rows(root.path());
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["isolate", "kill"]);
        assert_eq!(
            rows[0].verdict,
            "linearizable=invalid, replicas-identical=unknown"
        );
        assert!(!rows[0].is_valid() && rows[1].is_valid());
        assert_eq!(rows[1].faults, "2 (kill 1)");
        assert_eq!(rows[1].ops, "read 5/1/0");
        let table = table(&rows, None);
        assert!(
            table.contains(
                "| kill | 2 (kill 1) | read 5/1/0 | max 0.40 s | 1/1 valid | **valid** |"
            ),
            "{table}"
        );
    }
}
