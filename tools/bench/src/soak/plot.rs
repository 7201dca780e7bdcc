//! The soak's plot (`soak.svg`, plotters' SVG backend): four panels over
//! time in minutes, one line per gateway: resident memory, the snapshot
//! (file on disk solid, applied state dashed), the data directory on disk,
//! and the workload (sandboxes created and deleted in thousands, live
//! sandboxes in hundreds, members attached). A vertical line marks the end
//! of the first retention period, another the end of the churn.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use super::sample::{NodeSample, Soak};

/// Line colours of the gateways (n1, n2, ...) and the workload series.
const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(127, 127, 127),
];

const MIB: f64 = 1024.0 * 1024.0;

/// A series: legend label, colour, dashed, points (minutes, value).
struct Series {
    label: String,
    colour: RGBColor,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// One panel: caption, y unit, series.
struct Panel {
    caption: &'static str,
    unit: &'static str,
    series: Vec<Series>,
}

/// The per-node series of `value` (MiB), skipping samples where it reads 0.
fn node_series(soak: &Soak, value: impl Fn(&NodeSample) -> u64, dashed: bool) -> Vec<Series> {
    let names: Vec<String> = soak
        .samples
        .first()
        .map(|s| s.nodes.iter().map(|n| n.node.clone()).collect())
        .unwrap_or_default();
    names
        .iter()
        .enumerate()
        .map(|(i, name)| Series {
            label: if dashed {
                format!("{name} state")
            } else {
                name.clone()
            },
            colour: COLOURS[i % COLOURS.len()],
            dashed,
            points: soak
                .samples
                .iter()
                .filter_map(|s| {
                    let n = s.nodes.iter().find(|n| &n.node == name)?;
                    let v = value(n);
                    (v > 0).then_some((s.t_s / 60.0, v as f64 / MIB))
                })
                .collect(),
        })
        .collect()
}

fn workload_series(soak: &Soak) -> Vec<Series> {
    type Pick = fn(&super::sample::Counts) -> f64;
    let picks: [(&str, Pick); 4] = [
        ("created (thousands)", |c| c.created as f64 / 1000.0),
        ("deleted (thousands)", |c| c.deleted as f64 / 1000.0),
        ("live sandboxes (hundreds)", |c| c.live as f64 / 100.0),
        ("members attached", |c| c.members as f64),
    ];
    picks
        .iter()
        .enumerate()
        .map(|(i, (label, pick))| Series {
            label: (*label).to_string(),
            colour: COLOURS[(i + 2) % COLOURS.len()],
            dashed: false,
            points: soak
                .samples
                .iter()
                .map(|s| (s.t_s / 60.0, pick(&s.counts)))
                .collect(),
        })
        .collect()
}

fn panels(soak: &Soak) -> Vec<Panel> {
    let mut snapshot = node_series(soak, |n| n.snapshot_bytes, false);
    snapshot.extend(node_series(soak, |n| n.state_bytes, true));
    vec![
        Panel {
            caption: "gateway resident memory (VmRSS)",
            unit: "MiB",
            series: node_series(soak, |n| n.rss_bytes, false),
        },
        Panel {
            caption: "snapshot: current.snap on disk (solid), applied state encoding (dashed)",
            unit: "MiB",
            series: snapshot,
        },
        Panel {
            caption: "data directory on disk (du)",
            unit: "MiB",
            series: node_series(soak, |n| n.disk_bytes, false),
        },
        Panel {
            caption: "workload",
            unit: "count",
            series: workload_series(soak),
        },
    ]
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw_panel(area: &Area<'_>, panel: &Panel, soak: &Soak, x_max: f64) -> anyhow::Result<()> {
    let err = |e: DrawingAreaErrorKind<std::io::Error>| anyhow!("drawing the plot: {e}");
    let y_max = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(panel.caption, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("minutes since the workload started")
        .y_desc(panel.unit)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(err)?;
    let marks = [
        (soak.retention_end_s, "first retention period ends"),
        (soak.driver_done_s, "churn ends"),
    ];
    for (at, label) in marks {
        let Some(at) = at else { continue };
        let x = at / 60.0;
        chart
            .draw_series(DashedLineSeries::new(
                vec![(x, 0.0), (x, y_max)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                label.to_string(),
                (x + x_max * 0.005, y_max * 0.96),
                ("sans-serif", 13).into_font(),
            )))
            .map_err(err)?;
    }
    for s in &panel.series {
        let style = s.colour.stroke_width(2);
        let drawn = if s.dashed {
            chart.draw_series(DashedLineSeries::new(s.points.clone(), 5, 4, style))
        } else {
            chart.draw_series(LineSeries::new(s.points.clone(), style))
        };
        let colour = s.colour;
        drawn
            .map_err(err)?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Draws `soak` into `path` (SVG) under `title`.
///
/// # Errors
/// When the file cannot be written.
pub fn draw(soak: &Soak, path: &Path, title: &str) -> anyhow::Result<()> {
    let err = |e: DrawingAreaErrorKind<std::io::Error>| anyhow!("drawing the plot: {e}");
    let x_max = soak.samples.last().map_or(1.0, |s| s.t_s / 60.0).max(0.1) * 1.02;
    let root = SVGBackend::new(path, (1200, 1560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(err)?;
    let panels = panels(soak);
    let areas = root.split_evenly((panels.len(), 1));
    for (area, panel) in areas.iter().zip(&panels) {
        draw_panel(area, panel, soak, x_max)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::sample::{Counts, Sample};
    use super::*;

    #[test]
    fn draws_an_svg_with_every_panel_and_the_marks() {
        let soak = Soak {
            retention_end_s: Some(60.0),
            driver_done_s: Some(170.0),
            samples: (0..20u32)
                .map(|i| Sample {
                    t_s: f64::from(i) * 10.0,
                    counts: Counts {
                        created: u64::from(i) * 500,
                        members: 50,
                        ..Counts::default()
                    },
                    nodes: vec![NodeSample {
                        node: "n1".into(),
                        rss_bytes: 50 << 20,
                        snapshot_bytes: 3 << 20,
                        state_bytes: 3 << 20,
                        disk_bytes: 40 << 20,
                        ..NodeSample::default()
                    }],
                })
                .collect(),
            ..Soak::default()
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("soak.svg");
        draw(&soak, &path, "soak test").expect("draw");
        let svg = std::fs::read_to_string(&path).expect("read");
        for text in [
            "soak test",
            "resident memory",
            "current.snap",
            "first retention period ends",
            "members attached",
        ] {
            assert!(svg.contains(text), "no {text:?} in the plot");
        }
    }
}
