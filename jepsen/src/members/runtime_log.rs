//! What the sandbox runtimes of process members logged. The leader
//! gateway's process driver launches one runtime per sandbox generation,
//! each logging to `<run>/runtimes/<name>/runtime.log` beside its
//! `spec.json` (`sandbox_id`, `generation`); the launcher deletes that
//! directory once the generation is deleted or failed. So that the log
//! outlives it, [`keep_logs`] (called every 100 ms during the run and once
//! at its end) hard-links both files into `<run>/runtime-logs/` as
//! `<name>-<pid>.log` / `<name>-<pid>.spec.json` (same inode: the runtime
//! keeps appending to it after the directory is gone; a runtime that a
//! driver started twice under one name leaves two pairs). After the run
//! the `workload-continuity` checker ([`crate::checker::workload`]) reads,
//! per sandbox id ([`runtime_logs`]), how many runtimes started and which
//! grants they accepted.

use std::collections::BTreeMap;
use std::path::Path;

/// Where a run's process driver keeps its runtimes (`<run>/runtimes`).
pub const DRIVER_DIR: &str = "runtimes";
/// Where the harness keeps their logs (`<run>/runtime-logs`).
pub const LOGS_DIR: &str = "runtime-logs";

/// What one sandbox's runtimes logged (all generations, in generation
/// order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeLog {
    /// Runtimes started (`serving SandboxRuntime` lines).
    pub starts: usize,
    /// Grants the runtimes accepted, in log order (`activated` lines).
    pub activations: Vec<Activation>,
    /// Each time a runtime's workload was ended from outside while it ran:
    /// a `Release` (`released: stopping the workload`) or a driver delete
    /// (`shutdown requested`) logged after `workload started` and before
    /// any `workload stopped` (a workload that exited or hit its recovery
    /// deadline by itself logs `workload stopped` first). What the
    /// `healthy-workloads-kept` checker ([`crate::checker::kept`]) reads.
    pub ended_running: Vec<EndedRunning>,
}

/// A runtime whose workload was ended from outside while it ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndedRunning {
    /// The sandbox generation.
    pub generation: u64,
    /// `released` (a supervisor presented a release grant) or `shut down`
    /// (the driver deleted the runtime).
    pub how: &'static str,
    /// The log line's timestamp (the runtime's wall clock).
    pub at: String,
}

/// A grant a runtime accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Activation {
    /// Member named by the grant.
    pub member: String,
    /// Its incarnation.
    pub incarnation: u64,
    /// Ownership term.
    pub term: u64,
    /// Credential epoch.
    pub credential_epoch: u64,
}

/// The process driver's `spec.json`.
#[derive(serde::Deserialize)]
struct Spec {
    sandbox_id: String,
    generation: u64,
}

/// The line without ANSI colour sequences (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `value` of ` key=value` in a log line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    line[at..].split(char::is_whitespace).next()
}

/// Parses one runtime log.
pub fn parse_runtime_log(text: &str) -> RuntimeLog {
    let mut log = RuntimeLog::default();
    let mut running = false;
    for line in text.lines() {
        let line = strip_ansi(line);
        let line = line.as_str();
        let ended = if line.contains("released: stopping the workload") {
            Some("released")
        } else if line.contains("shutdown requested") {
            Some("shut down")
        } else {
            None
        };
        if line.contains("workload started") {
            running = true;
        } else if line.contains("workload stopped") {
            running = false;
        } else if let Some(how) = ended.filter(|_| running) {
            running = false;
            log.ended_running.push(EndedRunning {
                generation: 0,
                how,
                at: line
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            });
        }
        if line.contains("serving SandboxRuntime") {
            log.starts += 1;
        } else if line.contains(" activated") {
            let number = |k: &str| field(line, k).and_then(|v| v.parse::<u64>().ok());
            if let (Some(member), Some(incarnation), Some(term), Some(credential_epoch)) = (
                field(line, "member"),
                number("incarnation"),
                number("term"),
                number("credential_epoch"),
            ) {
                log.activations.push(Activation {
                    member: member.to_string(),
                    incarnation,
                    term,
                    credential_epoch,
                });
            }
        }
    }
    log
}

/// Hard-links `runtime.log` and `spec.json` of every runtime entry of
/// `driver_dir` that has a pid into `logs_dir` (created if missing), once
/// each. Best effort: an entry being created or deleted is picked up on
/// the next call or not at all.
pub fn keep_logs(driver_dir: &Path, logs_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(driver_dir) else {
        return;
    };
    if std::fs::create_dir_all(logs_dir).is_err() {
        return;
    }
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let dir = entry.path();
        let Some(pid) = std::fs::read_to_string(dir.join("pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
        else {
            continue;
        };
        let log = logs_dir.join(format!("{name}-{pid}.log"));
        if log.exists() {
            continue;
        }
        // The spec first: a log without its spec could not be attributed.
        let spec = logs_dir.join(format!("{name}-{pid}.spec.json"));
        if std::fs::hard_link(dir.join("spec.json"), &spec).is_ok() {
            let _ = std::fs::hard_link(dir.join("runtime.log"), &log);
        }
    }
}

/// Every sandbox's [`RuntimeLog`], from the pairs [`keep_logs`] left in
/// `logs_dir`, grouped by the spec's sandbox id (generations in order).
pub fn runtime_logs(logs_dir: &Path) -> BTreeMap<String, RuntimeLog> {
    let mut by_sandbox: BTreeMap<String, BTreeMap<(u64, String), RuntimeLog>> = BTreeMap::new();
    for (stem, path) in crate::files_with_suffix(logs_dir, ".log") {
        let spec = std::fs::read(logs_dir.join(format!("{stem}.spec.json")))
            .ok()
            .and_then(|b| serde_json::from_slice::<Spec>(&b).ok());
        let Some(spec) = spec else {
            continue;
        };
        let text = std::fs::read_to_string(path).unwrap_or_default();
        by_sandbox
            .entry(spec.sandbox_id)
            .or_default()
            .insert((spec.generation, stem), {
                let mut log = parse_runtime_log(&text);
                for e in &mut log.ended_running {
                    e.generation = spec.generation;
                }
                log
            });
    }
    by_sandbox
        .into_iter()
        .map(|(sandbox, logs)| {
            let mut all = RuntimeLog::default();
            for log in logs.into_values() {
                all.starts += log.starts;
                all.activations.extend(log.activations);
                all.ended_running.extend(log.ended_running);
            }
            (sandbox, all)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_logs_are_parsed_with_or_without_colour() {
        let text = "2026-11-29T13:19:34.695864Z  INFO supervisor::runtime: serving SandboxRuntime sandbox=sb32 addr=127.0.0.1:35319
2026-11-29T13:19:34.714752Z  INFO Activate{sandbox=sb32}: supervisor::runtime::service: activated member=s3 incarnation=17 term=1 credential_epoch=1
2026-11-29T13:20:02.028537Z  WARN Activate{sandbox=sb32}: supervisor::runtime::service: refused: credential epoch 2 is older than the current epoch 3 code=PermissionDenied
\u{1b}[2m2026\u{1b}[0m  INFO Activate: activated \u{1b}[3mmember\u{1b}[0m\u{1b}[2m=\u{1b}[0ms4 incarnation=18 term=3 credential_epoch=3\u{1b}[0m
";
        let log = parse_runtime_log(text);
        assert_eq!(log.starts, 1);
        assert_eq!(
            log.activations[0],
            Activation {
                member: "s3".into(),
                incarnation: 17,
                term: 1,
                credential_epoch: 1
            }
        );
        assert_eq!(
            log.activations[1],
            Activation {
                member: "s4".into(),
                incarnation: 18,
                term: 3,
                credential_epoch: 3
            }
        );
        assert_eq!(log.activations.len(), 2, "{log:?}");
    }

    #[test]
    fn kept_logs_outlive_their_entries_and_group_by_sandbox() {
        let run = tempfile::tempdir().expect("dir");
        let driver = run.path().join(DRIVER_DIR);
        let logs = run.path().join(LOGS_DIR);
        let entry = |name: &str, sandbox: &str, generation: u64, pid: u32, text: &str| {
            let dir = driver.join(name);
            std::fs::create_dir_all(&dir).expect("mkdir");
            std::fs::write(
                dir.join("spec.json"),
                format!("{{\"sandbox_id\":\"{sandbox}\",\"generation\":{generation}}}"),
            )
            .expect("spec");
            std::fs::write(dir.join("runtime.log"), text).expect("log");
            std::fs::write(dir.join("pid"), pid.to_string()).expect("pid");
        };
        let serving = "INFO supervisor::runtime: serving SandboxRuntime sandbox=x\n";
        let activated = |term: u64| {
            format!("INFO Activate: activated member=s1 incarnation=2 term={term} credential_epoch={term}\n")
        };
        entry(
            "sb1-g2",
            "sb1",
            2,
            12,
            &format!("{serving}{}", activated(3)),
        );
        entry(
            "sb1-g1",
            "sb1",
            1,
            11,
            &format!("{serving}{}", activated(1)),
        );
        // Being created: no pid yet, not linked.
        std::fs::create_dir_all(driver.join("sb2-g1")).expect("mkdir");
        keep_logs(&driver, &logs);
        // The launcher deletes an entry; the runtime still appends.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(driver.join("sb1-g1").join("runtime.log"))
            .expect("open");
        std::fs::remove_dir_all(driver.join("sb1-g1")).expect("rm");
        std::io::Write::write_all(&mut f, activated(2).as_bytes()).expect("append");
        keep_logs(&driver, &logs);
        let all = runtime_logs(&logs);
        assert_eq!(all.len(), 1, "{all:?}");
        let sb1 = &all["sb1"];
        assert_eq!(sb1.starts, 2);
        let terms: Vec<u64> = sb1.activations.iter().map(|a| a.term).collect();
        assert_eq!(terms, vec![1, 2, 3], "generation order, each log in order");
    }
}
