//! Runs the simulation for a range of seeds and prints, per seed, its trace
//! hash; a failing seed prints the end of its trace and the command that
//! replays it. Build with `RUSTFLAGS="--cfg tokio_unstable"` (see the
//! crate's README.md).
//!
//! ```text
//! sim --seed 42 --trace      one seed, every trace line
//! sim --seed 0 --count 1000  seeds 0..1000, then seeds per second
//! ```

use std::time::Instant;

use anyhow::{bail, Context};
use clap::Parser;

/// Runs seeds of the swarm scenario.
#[derive(Parser)]
#[command(name = "sim")]
struct Args {
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How many seeds, from `--seed` on.
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Print every trace line (one seed).
    #[arg(long)]
    trace: bool,
    /// Print only the summary, not a line per seed.
    #[arg(long)]
    quiet: bool,
    /// Turn on a fixed bug again (a build with `--features faults`):
    /// restart-as-leader.
    #[arg(long)]
    fault: Vec<String>,
    /// Run every seed twice and report the first event where the two
    /// traces differ (a determinism check).
    #[arg(long)]
    twice: bool,
}

/// Where two runs of `seed` first differ, if they do.
fn diverges(seed: u64) -> Option<String> {
    let lines = |run: Result<sim::Outcome, sim::Failure>| match run {
        Ok(outcome) => outcome.lines.unwrap_or_default(),
        Err(failure) => vec![failure.to_string()],
    };
    let first = lines(sim::run(seed, true));
    let second = lines(sim::run(seed, true));
    let at = first.iter().zip(&second).position(|(a, b)| a != b);
    match at {
        Some(i) => Some(format!("event {i}: {:?} then {:?}", first[i], second[i])),
        None if first.len() != second.len() => {
            Some(format!("{} events then {}", first.len(), second.len()))
        }
        None => None,
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    for name in &args.fault {
        sim::fault::set(name)?;
    }
    if args.count == 0 {
        bail!("--count must be at least 1");
    }
    let end = args
        .seed
        .checked_add(args.count)
        .context("--seed plus --count overflows u64")?;
    let started = Instant::now();
    let mut failed = Vec::new();
    for seed in args.seed..end {
        if args.twice {
            if let Some(divergence) = diverges(seed) {
                println!("seed {seed} is not deterministic: {divergence}");
                failed.push(seed);
            }
        }
        match sim::run(seed, args.trace) {
            Ok(outcome) => {
                if let Some(lines) = &outcome.lines {
                    for line in lines {
                        println!("{line}");
                    }
                }
                if !args.quiet {
                    println!(
                        "seed {seed} ok hash {} events {} sim {:?} acked {} lost-unsynced {} swarm {}",
                        outcome.hash,
                        outcome.events,
                        outcome.elapsed,
                        outcome.acked,
                        outcome.writes_lost,
                        outcome.swarm
                    );
                }
            }
            Err(failure) => {
                println!("{failure}");
                failed.push(seed);
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} seeds in {secs:.2} s ({:.2} seeds/s), {} failed{}",
        args.count,
        args.count as f64 / secs,
        failed.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(": {failed:?}")
        }
    );
    if !failed.is_empty() {
        bail!("{} seed(s) failed", failed.len());
    }
    Ok(())
}
