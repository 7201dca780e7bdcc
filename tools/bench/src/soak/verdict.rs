//! The soak's verdict: is each gateway's memory, snapshot, state and disk
//! flat after the first retention period?
//!
//! The window runs from the end of the first retention period (the first
//! delete plus the retention) to the end of the churn (the driver done, or
//! the last sample). For each metric and gateway it compares the mean of the
//! window's last third with the mean of its middle third, and fits a
//! least-squares slope over the whole window. A metric is **flat** when the
//! change between the two thirds is within the noise: at most
//! `tolerance_pct` percent of the middle third's mean, or twice the middle
//! third's standard deviation when that is larger (a snapshot file grows
//! and shrinks in steps as snapshots are taken, memory as the allocator
//! holds and returns pages). A state that keeps every deleted sandbox grows
//! by the same amount every minute, which no such margin hides.

use serde::{Deserialize, Serialize};

use super::sample::{NodeSample, Sample};

/// The metrics the verdict holds flat.
pub const METRICS: [Metric; 4] = [Metric::Rss, Metric::Snapshot, Metric::State, Metric::Disk];

/// One measured quantity of a gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Resident memory.
    Rss,
    /// The current snapshot file.
    Snapshot,
    /// The applied state's encoding.
    State,
    /// The data directory on disk.
    Disk,
}

impl Metric {
    /// Its name in tables (`rss`, `snapshot`, `state`, `disk`).
    pub fn name(self) -> &'static str {
        match self {
            Metric::Rss => "rss",
            Metric::Snapshot => "snapshot",
            Metric::State => "state",
            Metric::Disk => "disk",
        }
    }

    /// Its value in `n` (0: not read).
    pub fn of(self, n: &NodeSample) -> u64 {
        match self {
            Metric::Rss => n.rss_bytes,
            Metric::Snapshot => n.snapshot_bytes,
            Metric::State => n.state_bytes,
            Metric::Disk => n.disk_bytes,
        }
    }
}

/// One metric of one gateway over the window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The metric.
    pub metric: Metric,
    /// The gateway.
    pub node: String,
    /// Mean of the middle third, bytes.
    pub middle_mean: f64,
    /// Mean of the last third, bytes.
    pub last_mean: f64,
    /// (last − middle) / middle, percent.
    pub change_pct: f64,
    /// Least-squares slope over the window, percent of the middle mean
    /// per hour.
    pub slope_pct_per_hour: f64,
    /// Standard deviation of the middle third, percent of its mean.
    pub noise_pct: f64,
    /// Samples in the middle and last thirds.
    pub samples: usize,
    /// |change| within max(tolerance, 2 × noise).
    pub flat: bool,
}

/// The verdict over a soak's samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Window start, seconds.
    pub from_s: f64,
    /// Window end, seconds.
    pub to_s: f64,
    /// The tolerance used, percent.
    pub tolerance_pct: f64,
    /// Every metric of every gateway.
    pub rows: Vec<Row>,
    /// Every row flat (and there were rows).
    pub flat: bool,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn stddev(v: &[f64]) -> f64 {
    let m = mean(v);
    if v.len() < 2 {
        return 0.0;
    }
    (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// Least-squares slope of `points` (x, y); 0 with fewer than two x values.
fn slope(points: &[(f64, f64)]) -> f64 {
    let xs: Vec<f64> = points.iter().map(|p| p.0).collect();
    let ys: Vec<f64> = points.iter().map(|p| p.1).collect();
    let (mx, my) = (mean(&xs), mean(&ys));
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    if sxx <= 0.0 {
        return 0.0;
    }
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    sxy / sxx
}

/// The verdict over `samples` in the window `[from_s, to_s]`.
pub fn judge(samples: &[Sample], from_s: f64, to_s: f64, tolerance_pct: f64) -> Verdict {
    let third = (to_s - from_s) / 3.0;
    let (mid_from, last_from) = (from_s + third, from_s + 2.0 * third);
    let nodes: Vec<String> = samples
        .first()
        .map(|s| s.nodes.iter().map(|n| n.node.clone()).collect())
        .unwrap_or_default();
    let mut rows = Vec::new();
    for metric in METRICS {
        for node in &nodes {
            let points: Vec<(f64, f64)> = samples
                .iter()
                .filter(|s| s.t_s >= from_s && s.t_s <= to_s)
                .filter_map(|s| {
                    let n = s.nodes.iter().find(|n| &n.node == node)?;
                    let v = metric.of(n);
                    (v > 0).then_some((s.t_s, v as f64))
                })
                .collect();
            let middle: Vec<f64> = points
                .iter()
                .filter(|p| p.0 >= mid_from && p.0 < last_from)
                .map(|p| p.1)
                .collect();
            let last: Vec<f64> = points
                .iter()
                .filter(|p| p.0 >= last_from)
                .map(|p| p.1)
                .collect();
            if middle.is_empty() || last.is_empty() {
                continue;
            }
            let (middle_mean, last_mean) = (mean(&middle), mean(&last));
            let pct = |x: f64| {
                if middle_mean > 0.0 {
                    100.0 * x / middle_mean
                } else {
                    0.0
                }
            };
            let change_pct = pct(last_mean - middle_mean);
            let noise_pct = pct(stddev(&middle));
            rows.push(Row {
                metric,
                node: node.clone(),
                middle_mean,
                last_mean,
                change_pct,
                slope_pct_per_hour: pct(slope(&points) * 3600.0),
                noise_pct,
                samples: middle.len() + last.len(),
                flat: change_pct.abs() <= tolerance_pct.max(2.0 * noise_pct),
            });
        }
    }
    let flat = !rows.is_empty() && rows.iter().all(|r| r.flat);
    Verdict {
        from_s,
        to_s,
        tolerance_pct,
        rows,
        flat,
    }
}

fn mib(bytes: f64) -> String {
    format!("{:.2}", bytes / (1024.0 * 1024.0))
}

impl Verdict {
    /// A markdown table of the rows and a closing line.
    pub fn table(&self) -> String {
        let mut out = format!(
            "window {:.0}-{:.0} s (after the first retention period), thirds compared, tolerance {} %\n\n",
            self.from_s, self.to_s, self.tolerance_pct
        );
        out.push_str("| metric | node | middle third MiB | last third MiB | change % | slope %/h | noise % | flat |\n");
        out.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {:+.1} | {:+.1} | {:.1} | {} |\n",
                r.metric.name(),
                r.node,
                mib(r.middle_mean),
                mib(r.last_mean),
                r.change_pct,
                r.slope_pct_per_hour,
                r.noise_pct,
                if r.flat { "yes" } else { "NO" }
            ));
        }
        out.push_str(&format!(
            "\nverdict: {}\n",
            if self.flat {
                "flat (every metric of every gateway within the noise)"
            } else if self.rows.is_empty() {
                "undecided (no samples in the window)"
            } else {
                "NOT flat"
            }
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(f: impl Fn(f64) -> u64) -> Vec<Sample> {
        (0..=60)
            .map(|i| {
                let t = f64::from(i) * 10.0;
                Sample {
                    t_s: t,
                    nodes: vec![NodeSample {
                        node: "n1".into(),
                        rss_bytes: f(t),
                        snapshot_bytes: f(t),
                        state_bytes: f(t),
                        disk_bytes: f(t),
                        ..NodeSample::default()
                    }],
                    ..Sample::default()
                }
            })
            .collect()
    }

    #[test]
    fn a_steady_value_with_noise_is_flat() {
        let s = samples(|t| 10_000_000 + ((t as u64 * 7919) % 300_000));
        let v = judge(&s, 60.0, 600.0, 10.0);
        assert_eq!(v.rows.len(), 4);
        assert!(v.flat, "{}", v.table());
    }

    #[test]
    fn linear_growth_is_not_flat() {
        // What a state that keeps every deleted sandbox looks like.
        let s = samples(|t| 1_000_000 + (t as u64) * 20_000);
        let v = judge(&s, 60.0, 600.0, 10.0);
        assert!(!v.flat, "{}", v.table());
        assert!(v
            .rows
            .iter()
            .all(|r| r.change_pct > 20.0 && r.slope_pct_per_hour > 100.0));
        assert!(v.table().contains("NOT flat"));
    }

    #[test]
    fn no_samples_in_the_window_is_undecided() {
        let v = judge(&samples(|_| 5), 1000.0, 2000.0, 10.0);
        assert!(!v.flat);
        assert!(v.table().contains("undecided"));
    }
}
