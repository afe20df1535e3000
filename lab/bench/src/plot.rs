//! SVG plots of throughput over time: per scenario, the median run of each
//! tool overlaid; per tool, all of its repetitions (warm-up runs too).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::record::{Results, RunRecord, ScenarioResult};
use crate::sampler::throughput;
use crate::stats::index_of_median;

/// A named line: (seconds, Gbit/s) points.
struct Line {
    name: String,
    points: Vec<(f64, f64)>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn line_of(name: String, r: &RunRecord) -> Line {
    let points = throughput(&r.samples).into_iter().map(|(t, bps)| (t, bps / 1e9)).collect();
    Line { name, points }
}

/// Turns a label into a file-name-safe slug.
pub fn slug(label: &str) -> String {
    let s: String = label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    s.trim_matches('_').to_string()
}

fn draw(path: &Path, title: &str, lines: &[Line]) -> Result<()> {
    let x_max = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0)).fold(0.1, f64::max) * 1.02;
    let y_max = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)).fold(0.001, f64::max) * 1.1;
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow!("plot {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("time since client start (s)")
        .y_desc("throughput (Gbit/s)")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, l) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(l.points.iter().copied(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(l.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Plots one scenario; returns the files written.
pub fn plot_scenario(sc: &ScenarioResult, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut labels: Vec<&str> = Vec::new();
    for r in &sc.runs {
        if !labels.contains(&r.label.as_str()) {
            labels.push(&r.label);
        }
    }
    let mut overlay = Vec::new();
    let mut written = Vec::new();
    for label in labels {
        let all: Vec<&RunRecord> = sc.runs.iter().filter(|r| r.label == label && r.ok).collect();
        let runs: Vec<&RunRecord> = all.iter().copied().filter(|r| !r.warmup).collect();
        let ttcs: Vec<f64> = runs.iter().map(|r| r.ttc_s).collect();
        let Some(m) = index_of_median(&ttcs) else { continue };
        overlay.push(line_of(format!("{label} (median run)"), runs[m]));
        let name = |r: &RunRecord| format!("{} {}", if r.warmup { "warm-up" } else { "run" }, r.repetition);
        let reps: Vec<Line> = all.iter().map(|r| line_of(name(r), r)).collect();
        let file = dir.join(format!("{}--{}.svg", sc.name, slug(label)));
        draw(&file, &format!("{}: {label}, every run", sc.name), &reps)?;
        written.push(file);
    }
    let file = dir.join(format!("{}.svg", sc.name));
    draw(&file, &format!("{} ({})", sc.name, sc.path), &overlay)?;
    written.insert(0, file);
    Ok(written)
}

/// Plots every scenario into `dir`.
pub fn plot_all(res: &Results, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut all = Vec::new();
    for sc in &res.scenarios {
        all.extend(plot_scenario(sc, dir)?);
    }
    Ok(all)
}
