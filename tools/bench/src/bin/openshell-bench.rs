//! `openshell-bench`: parses arguments and calls the library.
//!
//! ```text
//! openshell-bench compare   [--runs 3] [--clients 1,8,64] [--systems ...] ...
//! openshell-bench failover  [--kills 20] [--pauses 20] [--transfers 20] ...
//! openshell-bench soak      [--duration-s 1800] [--sandboxes 100000] [--members 50] [--retention-ticks 240] ...
//! openshell-bench soak-plot <soak dir> [--tolerance-pct 10]
//! openshell-bench scale     [--members 200] [--sandboxes 10000] [--json docs/benchmarks/scale.json] ...
//! ```
//! Exit code: `compare` and `failover` are measurements: 0 once they ran,
//! 2 when they could not be carried out. `soak`: 0 flat, 1 not flat,
//! undecided or the churn did not finish, 2 it could not be carried out.
//! `scale`: 0 every target met, 1 a target missed, 2 it could not be
//! carried out.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "openshell-bench",
    version,
    about = "Benchmarks, soak and scale runs of the openshell gateway store"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The comparative benchmark: PostgreSQL 15, a 3-member etcd, 3
    /// gateways, the file limit and the in-process raft group under the
    /// same closed-loop CAS workload; tables, ratios, verdicts, JSON, plot.
    Compare(bench::compare::BenchArgs),
    /// Failover under the bench's 8-client load: kill -9 and SIGSTOP of the
    /// leader (gateways and etcd) and planned leader transfers (gateways);
    /// the window without a committed write of each, p50/p99, JSON, table.
    Failover(bench::compare::failover::FailoverArgs),
    /// The soak: gateways under sandbox and member churn for a long time;
    /// samples memory, snapshot and disk; a verdict and a plot.
    Soak(bench::soak::SoakArgs),
    /// The soak's verdict and plot again, from its directory's samples.json.
    SoakPlot {
        /// The soak directory.
        dir: PathBuf,
        /// The verdict's tolerance, percent.
        #[arg(long, default_value_t = 10.0)]
        tolerance_pct: f64,
    },
    /// The scale a real pool needs: 3 gateways, 200 supervisor streams,
    /// 10,000 sandboxes; RSS, restart to ready, takeover, push cost.
    Scale(bench::scale::ScaleArgs),
}

/// The workspace root: the nearest ancestor of the current directory whose
/// Cargo.toml has `[workspace]`.
fn workspace_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let mut dir: Option<&Path> = Some(&cwd);
    while let Some(d) = dir {
        if std::fs::read_to_string(d.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]")) {
            return d.to_path_buf();
        }
        dir = d.parent();
    }
    cwd
}

/// `compare`: a measurement, so the verdicts are printed, not the exit
/// code (0 once it ran, 2 when it could not be carried out).
fn compare(runtime: &tokio::runtime::Runtime, args: &bench::compare::BenchArgs) -> ExitCode {
    match runtime.block_on(bench::compare::run(args)) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("compare failed: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `failover`: a measurement: the windows are printed, not judged here.
fn failover(
    runtime: &tokio::runtime::Runtime,
    args: &bench::compare::failover::FailoverArgs,
) -> ExitCode {
    match runtime.block_on(bench::compare::failover::run(args)) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("failover failed: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `soak`: runs it, prints the verdict.
fn soak(runtime: &tokio::runtime::Runtime, args: &bench::soak::SoakArgs) -> ExitCode {
    let options = match args.options(&workspace_root()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(bench::soak::run(options)) {
        Ok(outcome) => {
            print!("{}", outcome.verdict.table());
            if !outcome.complete {
                println!("the churn did not finish within its limit (see verdict.md)");
            }
            println!(
                "soak: {}/ (soak.svg, samples.csv, verdict.md)",
                outcome.dir.display()
            );
            if outcome.verdict.flat && outcome.complete {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("soak failed: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `scale`: runs it, prints the table.
fn scale(runtime: &tokio::runtime::Runtime, args: &bench::scale::ScaleArgs) -> ExitCode {
    let options = match args.options(&workspace_root()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let out = options.out.clone();
    match runtime.block_on(bench::scale::run(options)) {
        Ok(report) => {
            print!("{}", report.table());
            println!(
                "load (1, 5, 15 min): before {}, after {}",
                report.load_before, report.load_after
            );
            println!("scale: {}/scale.json", out.display());
            if report.targets_met() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("scale failed: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `soak-plot`: the verdict and the plot again from a soak directory.
fn soak_plot(dir: &Path, tolerance_pct: f64) -> ExitCode {
    match bench::soak::replot(dir, tolerance_pct) {
        Ok(verdict) => {
            print!("{}", verdict.table());
            println!("plot: {}/soak.svg", dir.display());
            if verdict.flat {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(runtime) = jepsen::run::start_tool() else {
        return ExitCode::from(2);
    };
    match cli.command {
        Cmd::Compare(args) => compare(&runtime, &args),
        Cmd::Failover(args) => failover(&runtime, &args),
        Cmd::Soak(args) => soak(&runtime, &args),
        Cmd::SoakPlot { dir, tolerance_pct } => soak_plot(&dir, tolerance_pct),
        Cmd::Scale(args) => scale(&runtime, &args),
    }
}
