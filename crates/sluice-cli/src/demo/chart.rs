//! Charts as SVG: `--chart`'s timeline of every run, both phases, of what hit the key against its limit; and [`lines`], log-log line panels (`sluice bench scale --chart`).

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use super::replay::Run;
use super::scenario::{KEY_LIMIT, is_agent};

/// Sampling step of the timeline.
const BIN_MS: f64 = 100.0;
/// What the key counts over: its rolling window.
const WINDOW_MS: f64 = 1_000.0;

/// The four stacked layers, bottom to top, with their colours: accepted
/// requests first, so the rejected ones are what sticks out above the limit.
const LAYERS: [(&str, RGBColor); 4] = [
    ("sync job ok", RGBColor(70, 130, 180)),
    ("agent ok", RGBColor(44, 160, 44)),
    ("sync job 429", RGBColor(214, 39, 40)),
    ("agent 429", RGBColor(255, 127, 14)),
];

/// Requests started in the rolling second ending at each 100 ms step,
/// stacked by client and result: the quantity the key's limit caps.
fn series(run: &Run, until_ms: f64) -> Vec<[f64; 4]> {
    let steps = (until_ms / BIN_MS).ceil() as usize;
    (0..=steps)
        .map(|step| {
            let at = step as f64 * BIN_MS;
            let mut counts = [0.0; 4];
            for record in &run.records {
                let t = record.t_ms - run.start_ms;
                if t > at - WINDOW_MS && t <= at {
                    let layer = match (is_agent(record), record.status == 429) {
                        (false, false) => 0,
                        (true, false) => 1,
                        (false, true) => 2,
                        (true, true) => 3,
                    };
                    counts[layer] += 1.0;
                }
            }
            counts
        })
        .collect()
}

pub(crate) fn write(path: &Path, runs: &[Run], duration: Duration) -> anyhow::Result<()> {
    let until_ms = runs
        .iter()
        .flat_map(|run| run.records.iter().map(move |r| r.t_ms - run.start_ms))
        .fold(duration.as_secs_f64() * 1_000.0, f64::max);
    let all: Vec<Vec<[f64; 4]>> = runs.iter().map(|run| series(run, until_ms)).collect();
    let peak = all
        .iter()
        .flatten()
        .map(|counts| counts.iter().sum::<f64>())
        .fold(f64::from(KEY_LIMIT) * 1.5, f64::max)
        // Headroom above the tallest stack keeps the legend off the data.
        * 1.5;

    let root = SVGBackend::new(path, (960, 300 * runs.len() as u32 + 40)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(40);
    title.draw_text(
        "Requests on the shared key in each rolling second (limit: 10)",
        &("sans-serif", 20).into_text_style(&title),
        (20, 12),
    )?;
    for ((panel, run), stacks) in body
        .split_evenly((runs.len(), 1))
        .iter()
        .zip(runs)
        .zip(&all)
    {
        let mut chart = ChartBuilder::on(panel)
            .caption(
                match run.phase {
                    Some(phase) => format!("{} harness: {phase}", run.harness.name()),
                    None => format!("{} harness", run.harness.name()),
                },
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(44)
            .build_cartesian_2d(0.0..until_ms / 1_000.0, 0.0..peak.ceil())?;
        chart
            .configure_mesh()
            .x_desc("seconds since the run started")
            .y_desc("requests in the last 1 s")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .x_label_formatter(&|v| format!("{v:.0}"))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        // Draw the layers top-down as cumulative areas so each shows its own band.
        for layer in (0..LAYERS.len()).rev() {
            let (label, colour) = LAYERS[layer];
            let points = stacks.iter().enumerate().map(|(step, counts)| {
                let top: f64 = counts[..=layer].iter().sum();
                (step as f64 * BIN_MS / 1_000.0, top)
            });
            chart
                .draw_series(AreaSeries::new(points, 0.0, colour.mix(0.85)).border_style(colour))?
                .label(label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
                });
        }
        chart
            .draw_series(LineSeries::new(
                [
                    (0.0, f64::from(KEY_LIMIT)),
                    (until_ms / 1_000.0, f64::from(KEY_LIMIT)),
                ],
                BLACK.stroke_width(2),
            ))?
            .label("the key's limit")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.stroke_width(2)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.3))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// One line of a [`lines`] panel: its label and its points (x, y).
pub(crate) struct Line {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// One panel of a [`lines`] chart: both axes logarithmic, with dashed
/// horizontal marks (a target, a limit) labelled in the legend.
pub(crate) struct Panel {
    pub(crate) caption: String,
    pub(crate) x_desc: String,
    pub(crate) y_desc: String,
    pub(crate) lines: Vec<Line>,
    pub(crate) marks: Vec<(String, f64)>,
}

/// Line colours, in the order lines are drawn (the timeline's palette).
const LINE_COLOURS: [RGBColor; 4] = [
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(70, 130, 180),
    RGBColor(255, 127, 14),
];

/// Side-by-side log-log line charts, as an SVG at `path`, in the
/// timeline's style: one panel each, its lines marked at every point.
pub(crate) fn lines(path: &Path, title: &str, panels: &[Panel]) -> anyhow::Result<()> {
    let width = 520 * u32::try_from(panels.len().max(1))?;
    let root = SVGBackend::new(path, (width, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(40);
    head.draw_text(title, &("sans-serif", 20).into_text_style(&head), (20, 12))?;
    for (area, panel) in body
        .split_evenly((1, panels.len().max(1)))
        .iter()
        .zip(panels)
    {
        let xs = panel
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.0));
        let ys = panel
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .chain(panel.marks.iter().map(|m| m.1))
            .filter(|y| *y > 0.0);
        let (x_lo, x_hi) = xs.fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
        let (y_lo, y_hi) = ys.fold((f64::MAX, f64::MIN), |(lo, hi), y| (lo.min(y), hi.max(y)));
        let (x_lo, x_hi) = if x_lo <= x_hi {
            (x_lo.max(1e-9), x_hi)
        } else {
            (1.0, 10.0)
        };
        let (y_lo, y_hi) = if y_lo <= y_hi {
            (y_lo, y_hi)
        } else {
            (1.0, 10.0)
        };
        let x_range = (x_lo / 1.2)..(x_hi * 1.2);
        // Room above for the legend.
        let y_range = (y_lo / 2.0)..(y_hi * 8.0);
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.caption, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d(x_range.clone().log_scale(), y_range.log_scale())?;
        chart
            .configure_mesh()
            .x_desc(panel.x_desc.as_str())
            .y_desc(panel.y_desc.as_str())
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| {
                if *v >= 1.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.2}")
                }
            })
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        for (i, line) in panel.lines.iter().enumerate() {
            let colour = LINE_COLOURS[i % LINE_COLOURS.len()];
            let points: Vec<(f64, f64)> =
                line.points.iter().filter(|p| p.1 > 0.0).copied().collect();
            chart
                .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))?
                .label(line.label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 12, y)], colour.stroke_width(2))
                });
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, colour.filled())),
            )?;
        }
        for (label, y) in &panel.marks {
            let dashes = (0..40).map(|i| {
                let at = |j: f64| x_range.start * (x_range.end / x_range.start).powf(j / 80.0);
                PathElement::new(
                    [(at(2.0 * i as f64), *y), (at(2.0 * i as f64 + 1.0), *y)],
                    BLACK.stroke_width(1),
                )
            });
            chart
                .draw_series(dashes)?
                .label(label.as_str())
                .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.stroke_width(1)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.3))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
