//! The bench's results: one [`Run`] per pass over every system
//! (`run-<k>.json`), the targets as ratios of two systems' figures
//! ([`TARGETS`]), their medians over the runs and verdicts ([`Summary`],
//! `summary.json`, `summary.md`), and the printed tables.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::{BenchArgs, LevelResult};

/// One pass of the comparison over every system.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Run {
    /// 1-based run number.
    pub run: usize,
    /// UTC start time (RFC 3339).
    pub started_utc: String,
    /// `/proc/loadavg`'s 1, 5 and 15 minute load at the start.
    pub load: String,
    /// `git rev-parse --short HEAD` of the working directory, if any.
    pub commit: String,
    /// CPU cores.
    pub cores: usize,
    /// Keys in the key space.
    pub keys: usize,
    /// Warm-up per level, seconds.
    pub warmup_secs: f64,
    /// Measured window per level, seconds.
    pub secs: f64,
    /// Levels per system (`file`, `inproc`, `postgres`, `etcd`,
    /// `gateways`).
    pub systems: BTreeMap<String, Vec<LevelResult>>,
    /// Every target's ratio in this run.
    pub targets: Vec<TargetValue>,
}

/// Which way a target's ratio must go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Bound {
    /// ratio >= bound.
    AtLeast,
    /// ratio <= bound.
    AtMost,
}

/// What a ratio is made of.
#[derive(Clone, Copy, Debug)]
pub enum Figure {
    /// Writes per second.
    Throughput,
    /// Median latency.
    P50,
    /// 99th percentile latency.
    P99,
    /// The servers' CPU seconds per 1,000 committed writes.
    CpuPerWrite,
}

/// One target of the issue: `system / reference` of `figure` at `clients`.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Stable id (JSON key).
    pub id: &'static str,
    /// The system measured.
    pub system: &'static str,
    /// The system it is compared with.
    pub reference: &'static str,
    /// Concurrency.
    pub clients: usize,
    /// What is compared.
    pub figure: Figure,
    /// Direction.
    pub bound: Bound,
    /// The bound.
    pub value: f64,
}

/// The targets (its "Targets" section) that this bench measures.
pub const TARGETS: [Target; 12] = [
    t(
        "gw_pg_tput_64",
        "gateways",
        "postgres",
        64,
        Figure::Throughput,
        Bound::AtLeast,
        4.0,
    ),
    t(
        "gw_etcd_tput_64",
        "gateways",
        "etcd",
        64,
        Figure::Throughput,
        Bound::AtLeast,
        3.0,
    ),
    t(
        "gw_etcd_p99_64",
        "gateways",
        "etcd",
        64,
        Figure::P99,
        Bound::AtMost,
        1.0,
    ),
    t(
        "gw_etcd_cpu_64",
        "gateways",
        "etcd",
        64,
        Figure::CpuPerWrite,
        Bound::AtMost,
        1.0,
    ),
    t(
        "gw_inproc_tput_64",
        "gateways",
        "inproc",
        64,
        Figure::Throughput,
        Bound::AtLeast,
        0.6,
    ),
    t(
        "gw_etcd_tput_8",
        "gateways",
        "etcd",
        8,
        Figure::Throughput,
        Bound::AtLeast,
        1.0,
    ),
    t(
        "gw_etcd_p50_8",
        "gateways",
        "etcd",
        8,
        Figure::P50,
        Bound::AtMost,
        1.0,
    ),
    t(
        "gw_etcd_tput_1",
        "gateways",
        "etcd",
        1,
        Figure::Throughput,
        Bound::AtLeast,
        1.0,
    ),
    t(
        "gw_etcd_p50_1",
        "gateways",
        "etcd",
        1,
        Figure::P50,
        Bound::AtMost,
        1.0,
    ),
    t(
        "gw_pg_p50_1",
        "gateways",
        "postgres",
        1,
        Figure::P50,
        Bound::AtMost,
        2.0,
    ),
    t(
        "inproc_file_tput_64",
        "inproc",
        "file",
        64,
        Figure::Throughput,
        Bound::AtLeast,
        0.25,
    ),
    t(
        "inproc_file_p50_1",
        "inproc",
        "file",
        1,
        Figure::P50,
        Bound::AtMost,
        3.0,
    ),
];

const fn t(
    id: &'static str,
    system: &'static str,
    reference: &'static str,
    clients: usize,
    figure: Figure,
    bound: Bound,
    value: f64,
) -> Target {
    Target {
        id,
        system,
        reference,
        clients,
        figure,
        bound,
        value,
    }
}

impl Target {
    /// `gateways/etcd p99 at 64 clients <= 1`.
    pub fn describe(&self) -> String {
        let figure = match self.figure {
            Figure::Throughput => "throughput",
            Figure::P50 => "p50",
            Figure::P99 => "p99",
            Figure::CpuPerWrite => "server CPU per write",
        };
        let op = match self.bound {
            Bound::AtLeast => ">=",
            Bound::AtMost => "<=",
        };
        format!(
            "{}/{} {figure} at {} client{} {op} {}",
            self.system,
            self.reference,
            self.clients,
            if self.clients == 1 { "" } else { "s" },
            self.value
        )
    }

    /// This target's ratio in `run`, when both systems ran at that level.
    pub fn ratio(&self, run: &Run) -> Option<f64> {
        let level = |s: &str| {
            run.systems
                .get(s)?
                .iter()
                .find(|l| l.clients == self.clients)
                .cloned()
        };
        let (a, b) = (level(self.system)?, level(self.reference)?);
        let pick = |l: &LevelResult| match self.figure {
            Figure::Throughput => l.per_sec,
            Figure::P50 => l.p50_us,
            Figure::P99 => l.p99_us,
            Figure::CpuPerWrite => l.cpu_s_per_1000,
        };
        let (x, y) = (pick(&a), pick(&b));
        (y > 0.0 && a.ops > 0).then(|| x / y)
    }

    /// Whether `ratio` meets the target.
    pub fn met(&self, ratio: f64) -> bool {
        match self.bound {
            Bound::AtLeast => ratio >= self.value,
            Bound::AtMost => ratio <= self.value,
        }
    }
}

/// A target's ratio in one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetValue {
    /// [`Target::id`].
    pub id: String,
    /// [`Target::describe`].
    pub target: String,
    /// The ratio (`None`: a system did not run at that level).
    pub ratio: Option<f64>,
    /// Whether it meets the target.
    pub met: Option<bool>,
}

impl Run {
    /// An empty run `k` with the command's settings and the load.
    pub fn new(k: usize, args: &BenchArgs, load: String) -> Run {
        Run {
            run: k,
            started_utc: utc_now(),
            load,
            commit: commit(),
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            keys: args.keys,
            warmup_secs: args.warmup_secs,
            secs: args.secs,
            ..Run::default()
        }
    }

    /// Computes the targets' ratios.
    pub fn finish(&mut self) {
        self.targets = TARGETS
            .iter()
            .map(|t| {
                let ratio = t.ratio(self);
                TargetValue {
                    id: t.id.into(),
                    target: t.describe(),
                    ratio,
                    met: ratio.map(|r| t.met(r)),
                }
            })
            .collect();
    }
}

/// A target over every run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetSummary {
    /// [`Target::id`].
    pub id: String,
    /// [`Target::describe`].
    pub target: String,
    /// The ratio in each run.
    pub runs: Vec<Option<f64>>,
    /// Median over the runs that measured it.
    pub median: Option<f64>,
    /// `met`, `MISS` or `not measured`.
    pub verdict: String,
}

/// Median figures of one system at one concurrency over every run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MedianLevel {
    /// System.
    pub system: String,
    /// Concurrency.
    pub clients: usize,
    /// Median writes per second.
    pub per_sec: f64,
    /// Median p50, microseconds.
    pub p50_us: f64,
    /// Median p99, microseconds.
    pub p99_us: f64,
    /// Median p999, microseconds.
    pub p999_us: f64,
    /// CAS conflicts over every run.
    /// Server CPU seconds per 1,000 writes (0: not measured).
    #[serde(default)]
    pub cpu_s_per_1000: f64,
    pub conflicts: u64,
    /// Other errors over every run.
    pub errors: u64,
}

/// `summary.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    /// Runs summarized.
    pub runs: usize,
    /// Load at each run's start.
    pub loads: Vec<String>,
    /// Commit of the first run.
    pub commit: String,
    /// Start of the first run (UTC).
    pub started_utc: String,
    /// Per system and concurrency, medians over the runs.
    pub levels: Vec<MedianLevel>,
    /// Every target.
    pub targets: Vec<TargetSummary>,
}

/// The median of the finite values (`None` when there are none).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

impl Summary {
    /// Medians and verdicts over `runs`.
    pub fn new(runs: &[Run]) -> Summary {
        let mut levels = Vec::new();
        let mut keys: Vec<(String, usize)> = Vec::new();
        for r in runs {
            for (s, ls) in &r.systems {
                for l in ls {
                    if !keys.contains(&(s.clone(), l.clients)) {
                        keys.push((s.clone(), l.clients));
                    }
                }
            }
        }
        for (system, clients) in keys {
            let all: Vec<&LevelResult> = runs
                .iter()
                .filter_map(|r| {
                    r.systems
                        .get(&system)?
                        .iter()
                        .find(|l| l.clients == clients)
                })
                .collect();
            let m = |f: fn(&LevelResult) -> f64| {
                median(&all.iter().map(|l| f(l)).collect::<Vec<_>>()).unwrap_or(0.0)
            };
            levels.push(MedianLevel {
                system: system.clone(),
                clients,
                per_sec: m(|l| l.per_sec),
                p50_us: m(|l| l.p50_us),
                p99_us: m(|l| l.p99_us),
                p999_us: m(|l| l.p999_us),
                cpu_s_per_1000: m(|l| l.cpu_s_per_1000),
                conflicts: all.iter().map(|l| l.conflicts).sum(),
                errors: all.iter().map(|l| l.errors).sum(),
            });
        }
        let targets = TARGETS
            .iter()
            .map(|t| {
                let per_run: Vec<Option<f64>> = runs.iter().map(|r| t.ratio(r)).collect();
                let med = median(&per_run.iter().flatten().copied().collect::<Vec<_>>());
                let verdict = match med {
                    Some(m) if t.met(m) => "met",
                    Some(_) => "MISS",
                    None => "not measured",
                };
                TargetSummary {
                    id: t.id.into(),
                    target: t.describe(),
                    runs: per_run,
                    median: med,
                    verdict: verdict.into(),
                }
            })
            .collect();
        Summary {
            runs: runs.len(),
            loads: runs.iter().map(|r| r.load.clone()).collect(),
            commit: runs.first().map(|r| r.commit.clone()).unwrap_or_default(),
            started_utc: runs
                .first()
                .map(|r| r.started_utc.clone())
                .unwrap_or_default(),
            levels,
            targets,
        }
    }
}

/// `/proc/loadavg`'s three load averages.
pub fn uptime() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn commit() -> String {
    command_output("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into())
}

fn utc_now() -> String {
    command_output("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]).unwrap_or_else(|| "unknown".into())
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// Writes `run-<k>.json` into `out`.
///
/// # Errors
/// When the file cannot be written.
pub fn write_run(out: &Path, run: &Run) -> anyhow::Result<()> {
    write_json(&out.join(format!("run-{}.json", run.run)), run)
}

/// Writes `summary.json` and `summary.md` into `out`.
///
/// # Errors
/// When a file cannot be written.
pub fn write_summary(out: &Path, summary: &Summary, runs: &[Run]) -> anyhow::Result<()> {
    write_json(&out.join("summary.json"), summary)?;
    let md = summary_markdown(summary, runs);
    std::fs::write(out.join("summary.md"), md)
        .with_context(|| format!("writing {}", out.join("summary.md").display()))
}

/// Server CPU seconds per 1,000 writes ("-": in-process, not measured).
fn fmt_cpu(v: f64) -> String {
    if v > 0.0 {
        format!("{v:.3}")
    } else {
        "-".into()
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{r:.2}"))
}

/// The levels of one run and its ratios, as markdown tables.
pub fn run_table(run: &Run) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "run {} ({}, load {}, commit {})\n",
        run.run, run.started_utc, run.load, run.commit
    );
    s.push_str(
        "| system | clients | writes/s | p50 ms | p99 ms | p999 ms | server CPU s / 1,000 writes | conflicts | errors |\n",
    );
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (name, levels) in &run.systems {
        for l in levels {
            let _ = writeln!(
                s,
                "| {name} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
                l.clients,
                l.per_sec,
                l.p50_us / 1e3,
                l.p99_us / 1e3,
                l.p999_us / 1e3,
                fmt_cpu(l.cpu_s_per_1000),
                l.conflicts,
                l.errors
            );
        }
    }
    s.push_str("\n| target | ratio | |\n|---|---:|---|\n");
    for t in &run.targets {
        let verdict = match t.met {
            Some(true) => "met",
            Some(false) => "MISS",
            None => "not measured",
        };
        let _ = writeln!(s, "| {} | {} | {verdict} |", t.target, fmt_ratio(t.ratio));
    }
    s
}

/// `summary.md`: the median figures, then every target with each run's
/// ratio, the median and the verdict.
pub fn summary_markdown(summary: &Summary, runs: &[Run]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Medians over {} run(s), first started {} at commit {}; load at each run's start: {}.\n",
        summary.runs,
        summary.started_utc,
        summary.commit,
        summary.loads.join(" / ")
    );
    s.push_str(
        "| system | clients | writes/s | p50 ms | p99 ms | p999 ms | server CPU s / 1,000 writes | conflicts | errors |\n",
    );
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for l in &summary.levels {
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
            l.system,
            l.clients,
            l.per_sec,
            l.p50_us / 1e3,
            l.p99_us / 1e3,
            l.p999_us / 1e3,
            fmt_cpu(l.cpu_s_per_1000),
            l.conflicts,
            l.errors
        );
    }
    s.push_str("\n| target |");
    for r in runs {
        let _ = write!(s, " run {} |", r.run);
    }
    s.push_str(" median | verdict |\n|---|");
    for _ in runs {
        s.push_str("---:|");
    }
    s.push_str("---:|---|\n");
    for t in &summary.targets {
        let _ = write!(s, "| {} |", t.target);
        for r in &t.runs {
            let _ = write!(s, " {} |", fmt_ratio(*r));
        }
        let _ = writeln!(s, " {} | {} |", fmt_ratio(t.median), t.verdict);
    }
    s
}
