//! The comparison's plot (`docs/benchmarks/compare.svg`, plotters' SVG
//! backend): two panels over the concurrency (log scale), one line per
//! system, each point the median over the runs: throughput (writes/s, log
//! scale) and p99 latency (ms, log scale).

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use super::report::{Run, Summary};

/// Colours of the systems, in [`super::SYSTEMS`] order.
const COLOURS: [RGBColor; 5] = [
    RGBColor(127, 127, 127),
    RGBColor(148, 103, 189),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// Legend label of a system.
fn label(system: &str) -> &str {
    match system {
        "file" => "file limit (1 process, fdatasync per batch)",
        "inproc" => "in-process raft (3 nodes, 1 process)",
        "postgres" => "PostgreSQL 15 (fenced write, 1 server)",
        "etcd" => "etcd 3.4 (3 members, txn CAS)",
        "gateways" => "openshell gateways (3, Put CAS)",
        other => other,
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// One panel: `(clients, value)` per system.
fn panel(
    area: &Area<'_>,
    caption: &str,
    unit: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> anyhow::Result<()> {
    let err = |e: DrawingAreaErrorKind<std::io::Error>| anyhow!("drawing the plot: {e}");
    let values = series.iter().flat_map(|s| s.1.iter().map(|p| p.1));
    let (lo, hi) = values.fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if hi > 0.0 {
        (lo.max(1e-3) / 2.0, hi * 2.0)
    } else {
        (0.1, 10.0)
    };
    let x_max = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(1.0f64, f64::max)
        * 1.6;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d((0.7f64..x_max).log_scale(), (lo..hi).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("concurrent closed-loop clients")
        .y_desc(unit)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| {
            if *y >= 100.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        })
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(err)?;
    for (i, (system, points)) in series.iter().enumerate() {
        let idx = super::SYSTEMS.iter().position(|s| s == system).unwrap_or(i);
        let colour = COLOURS[idx % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))
            .map_err(err)?
            .label(label(system))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, colour.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Draws the medians of `runs` into `path`.
///
/// # Errors
/// When the file cannot be written.
pub fn draw(path: &Path, runs: &[Run]) -> anyhow::Result<()> {
    let err = |e: DrawingAreaErrorKind<std::io::Error>| anyhow!("drawing the plot: {e}");
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let summary = Summary::new(runs);
    let mut systems: Vec<String> = summary.levels.iter().map(|l| l.system.clone()).collect();
    systems.dedup();
    systems.sort_by_key(|s| super::SYSTEMS.iter().position(|x| x == s).unwrap_or(99));
    systems.dedup();
    let series = |pick: fn(&super::report::MedianLevel) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        systems
            .iter()
            .map(|s| {
                let points = summary
                    .levels
                    .iter()
                    .filter(|l| &l.system == s && pick(l) > 0.0)
                    .map(|l| (l.clients as f64, pick(l)))
                    .collect();
                (s.clone(), points)
            })
            .collect()
    };
    let title = format!(
        "openshell-bench compare: medians of {} run(s), commit {}, {} keys, 256-byte values",
        summary.runs,
        summary.commit,
        runs.first().map_or(0, |r| r.keys)
    );
    let root = SVGBackend::new(path, (1100, 1200)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(&title, ("sans-serif", 20)).map_err(err)?;
    let areas = root.split_evenly((2, 1));
    panel(
        &areas[0],
        "throughput (higher is better)",
        "writes/s",
        &series(|l| l.per_sec),
    )?;
    panel(
        &areas[1],
        "p99 latency (lower is better)",
        "ms",
        &series(|l| l.p99_us / 1e3),
    )?;
    root.present().map_err(err)?;
    Ok(())
}
