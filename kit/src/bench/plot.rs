//! The SVG plot: speedup (baseline time / weft time) against message size, one line per case and element type.
//!
//! Pure (no GPU); `tests/bench_harness.rs` tests it.

use std::path::Path;

use plotters::prelude::*;

use super::options::{format_size, Dtype};
use super::report::Row;

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 620;

/// Line colours, one per case (Tableau 10: distinct, and readable on white).
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One line of the plot: `(log₂ bytes, speedup)` points of one case at one element type, in row order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// `case dtype` (`allreduce f32`), the legend entry.
    pub label: String,
    /// Which case, counting cases in order of first appearance: picks the colour.
    pub case_index: usize,
    /// The element type: f32 lines are solid, bf16 lines dashed.
    pub dtype: Dtype,
    /// The points.
    pub points: Vec<(f64, f64)>,
}

/// Groups rows into series, keeping the order in which each (case, dtype) first appears. Rows whose speedup is
/// not finite (a side that did not run) are left out.
pub fn series(rows: &[Row]) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    let mut cases: Vec<&str> = Vec::new();
    for row in rows {
        let label = format!("{} {}", row.case, row.dtype.name());
        let speedup = row.speedup();
        if !speedup.is_finite() || row.bytes == 0 {
            continue;
        }
        let point = ((row.bytes as f64).log2(), speedup);
        let case_index = cases.iter().position(|&case| case == row.case).unwrap_or_else(|| {
            cases.push(&row.case);
            cases.len() - 1
        });
        match out.iter_mut().find(|s| s.label == label) {
            Some(existing) => existing.points.push(point),
            None => out.push(Series { label, case_index, dtype: row.dtype, points: vec![point] }),
        }
    }
    out
}

/// The plot as SVG text; `subtitle` names the machine (GPU, NCCL, ranks).
pub fn speedup_svg(rows: &[Row], subtitle: &str) -> Result<String, String> {
    let lines = series(rows);
    if lines.is_empty() {
        return Err("no measured rows to plot".into());
    }
    let points = lines.iter().flat_map(|s| s.points.iter());
    let (mut x_min, mut x_max, mut y_max) = (f64::INFINITY, f64::NEG_INFINITY, 1.0f64);
    for &(x, y) in points {
        x_min = x_min.min(x);
        x_max = x_max.max(x);
        y_max = y_max.max(y);
    }
    // Whole powers of two at both ends, so the size labels fall on the measured points.
    let (x_min, x_max) = (x_min.floor() - 0.5, x_max.ceil() + 0.5);
    let y_max = (y_max * 1.15).max(1.5);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("weft fused kernels: speedup over NCCL + separate epilogue ({subtitle})"),
                ("sans-serif", 20),
            )
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(x_min..x_max, 0.0..y_max)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("message size per rank (log scale)")
            .y_desc("speedup (baseline time / weft time)")
            .x_labels(((x_max - x_min) as usize).clamp(2, 32))
            .x_label_formatter(&|x| size_label(*x))
            .draw()
            .map_err(|e| e.to_string())?;
        // Speedup 1: above the line the fused kernel wins.
        chart
            .draw_series(LineSeries::new([(x_min, 1.0), (x_max, 1.0)], BLACK.mix(0.5).stroke_width(1)))
            .map_err(|e| e.to_string())?
            .label("1.0 (break-even)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.mix(0.5)));
        for line in &lines {
            let color = COLORS[line.case_index % COLORS.len()];
            let style = color.stroke_width(2);
            let legend = match line.dtype {
                Dtype::F32 => {
                    chart.draw_series(LineSeries::new(line.points.iter().copied(), style)).map_err(|e| e.to_string())?
                }
                Dtype::Bf16 => chart
                    .draw_series(DashedLineSeries::new(line.points.iter().copied(), 8, 5, style))
                    .map_err(|e| e.to_string())?,
            };
            let dashed = line.dtype == Dtype::Bf16;
            legend.label(line.label.as_str()).legend(move |(x, y)| {
                if dashed {
                    PathElement::new([(x, y), (x + 8, y)], style)
                } else {
                    PathElement::new([(x, y), (x + 20, y)], style)
                }
            });
            chart
                .draw_series(line.points.iter().map(|&point| Circle::new(point, 3, color.filled())))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// `4 KB` at whole powers of two, nothing between them.
fn size_label(log2_bytes: f64) -> String {
    let rounded = log2_bytes.round();
    if (log2_bytes - rounded).abs() > 1e-6 || !(0.0..63.0).contains(&rounded) {
        return String::new();
    }
    format_size(1usize << rounded as u32)
}

/// Writes the plot to `path` (creating its directory).
pub fn write_speedup_svg(path: &Path, rows: &[Row], subtitle: &str) -> Result<(), String> {
    let svg = speedup_svg(rows, subtitle)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
