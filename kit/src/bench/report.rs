//! One row per (case, element type, size): the terminal table and the CSV.
//!
//! Pure (no GPU); `tests/bench_harness.rs` tests it.

use super::options::{format_size, Dtype};
use super::stats::Summary;

/// What was measured for one case at one element type and size (the slowest rank's timings, the worst
/// rank's errors).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The case's name (`allreduce`).
    pub case: String,
    /// The element type.
    pub dtype: Dtype,
    /// Message size in bytes per rank.
    pub bytes: usize,
    /// Ranks (one per GPU).
    pub nranks: usize,
    /// The fused weft kernel, µs per run.
    pub weft: Summary,
    /// The unfused baseline (NCCL collective(s) + epilogue kernel), µs per run.
    pub baseline: Summary,
    /// The fewest bytes of device memory one rank's fused pass must move (each input read once, each output
    /// written once, including what peers read from this rank's memory).
    pub bytes_moved: u64,
    /// How many input sets the timed runs rotated through (more than one defeats the L2 cache).
    pub input_sets: usize,
    /// ‖out − ref‖ / ‖ref‖ of the fused kernel against the f64 host reference (infinite: an element was not
    /// written or not finite).
    pub weft_error: f64,
    /// The same for the baseline.
    pub baseline_error: f64,
    /// The largest error that passes.
    pub tolerance: f64,
    /// For all-reduce-like cases on several ranks, nccl-tests' bus-bandwidth factor (`2(n − 1)/n`): bus bandwidth
    /// is message size / time × factor, comparable across rank counts and with the link rate.
    pub bus_factor: Option<f64>,
}

impl Row {
    /// Baseline time over weft time: above 1, the fused kernel is faster.
    pub fn speedup(&self) -> f64 {
        self.baseline.median / self.weft.median
    }

    /// `bytes_moved` over the fused kernel's median time, in GB/s (10⁹ bytes).
    pub fn weft_gbps(&self) -> f64 {
        gbps(self.bytes_moved, self.weft.median)
    }

    /// The same bytes over the baseline's median time: what the baseline achieves counted at the fused
    /// kernel's minimal traffic (its real traffic is larger; that is the point of fusing).
    pub fn baseline_gbps(&self) -> f64 {
        gbps(self.bytes_moved, self.baseline.median)
    }

    /// The fused kernel's bus bandwidth (message bytes per rank / time × `bus_factor`), in GB/s.
    pub fn weft_busbw(&self) -> Option<f64> {
        self.bus_factor.map(|factor| gbps(self.bytes as u64, self.weft.median) * factor)
    }

    /// The baseline's bus bandwidth.
    pub fn baseline_busbw(&self) -> Option<f64> {
        self.bus_factor.map(|factor| gbps(self.bytes as u64, self.baseline.median) * factor)
    }

    /// The fused kernel's GB/s as a percentage of `limit_gbps`.
    pub fn percent_of_limit(&self, limit_gbps: f64) -> f64 {
        100.0 * self.weft_gbps() / limit_gbps
    }

    /// Whether both sides match the reference within the tolerance (NaN and infinity never do).
    pub fn passed(&self) -> bool {
        self.weft_error <= self.tolerance && self.baseline_error <= self.tolerance
    }
}

fn gbps(bytes: u64, micros: f64) -> f64 {
    bytes as f64 / (micros * 1e-6) / 1e9
}

/// The terminal table: one line per row, grouped by case and element type as the rows come.
pub fn table(rows: &[Row], limit_gbps: f64) -> String {
    let width = rows.iter().map(|row| row.case.chars().count()).max().unwrap_or(0).max(4);
    let mut out = format!(
        "{:<width$} {:>9} {:>5} {:>11} {:>12} {:>8} {:>9} {:>8} {:>10}  {}\n",
        "case", "size", "dtype", "weft µs", "baseline µs", "speedup", "GB/s", "% limit", "bus GB/s", "check"
    );
    let mut previous: Option<(&str, Dtype)> = None;
    for row in rows {
        if previous.is_some_and(|p| p != (row.case.as_str(), row.dtype)) {
            out.push('\n');
        }
        previous = Some((row.case.as_str(), row.dtype));
        out.push_str(&format!(
            "{:<width$} {:>9} {:>5} {:>11.2} {:>12.2} {:>7.2}x {:>9.1} {:>7.1}% {:>10}  {}\n",
            row.case,
            format_size(row.bytes),
            row.dtype.name(),
            row.weft.median,
            row.baseline.median,
            row.speedup(),
            row.weft_gbps(),
            row.percent_of_limit(limit_gbps),
            row.weft_busbw().map_or_else(|| "-".to_string(), |bus| format!("{bus:.1}")),
            check_text(row),
        ));
    }
    out
}

fn check_text(row: &Row) -> String {
    let verdict = if row.passed() { "ok" } else { "FAILED" };
    format!("{verdict} (err {:.1e} / {:.1e})", row.weft_error, row.baseline_error)
}

/// The CSV's columns, in order.
pub const CSV_COLUMNS: &[&str] = &[
    "case",
    "dtype",
    "bytes_per_rank",
    "nranks",
    "weft_us_median",
    "weft_us_p10",
    "weft_us_p90",
    "baseline_us_median",
    "baseline_us_p10",
    "baseline_us_p90",
    "samples",
    "speedup",
    "bytes_moved",
    "weft_gbps",
    "baseline_gbps",
    "weft_busbw_gbps",
    "baseline_busbw_gbps",
    "percent_of_limit",
    "limit_gbps",
    "input_sets",
    "weft_rel_error",
    "baseline_rel_error",
    "tolerance",
    "passed",
    "gpu",
    "nccl",
];

/// The CSV: a header line, then one line per row. `gpu` and `nccl` name the machine and library in every
/// line, so a file read on its own still says where it was measured.
pub fn csv(rows: &[Row], limit_gbps: f64, gpu: &str, nccl: &str) -> String {
    let mut out = CSV_COLUMNS.join(",");
    out.push('\n');
    for row in rows {
        let fields = [
            csv_field(&row.case),
            row.dtype.name().to_string(),
            row.bytes.to_string(),
            row.nranks.to_string(),
            number(row.weft.median),
            number(row.weft.p10),
            number(row.weft.p90),
            number(row.baseline.median),
            number(row.baseline.p10),
            number(row.baseline.p90),
            row.weft.samples.min(row.baseline.samples).to_string(),
            number(row.speedup()),
            row.bytes_moved.to_string(),
            number(row.weft_gbps()),
            number(row.baseline_gbps()),
            row.weft_busbw().map(number).unwrap_or_default(),
            row.baseline_busbw().map(number).unwrap_or_default(),
            number(row.percent_of_limit(limit_gbps)),
            number(limit_gbps),
            row.input_sets.to_string(),
            number(row.weft_error),
            number(row.baseline_error),
            number(row.tolerance),
            row.passed().to_string(),
            csv_field(gpu),
            csv_field(nccl),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// A float as CSV text: shortest round-trip form, `inf` / `NaN` spelled the way spreadsheets and pandas read.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{value}")
    }
}

/// RFC 4180 quoting: fields with a comma, quote or line break are quoted, quotes doubled.
pub fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// One row per measurement from the rows of every rank: the slowest rank's timings (a collective takes as
/// long as its slowest member) and the worst errors.
pub fn merge_ranks(per_rank: Vec<Vec<Row>>) -> Vec<Row> {
    let mut ranks = per_rank.into_iter();
    let Some(mut merged) = ranks.next() else { return Vec::new() };
    for rows in ranks {
        for (into, row) in merged.iter_mut().zip(rows) {
            if row.weft.median > into.weft.median {
                into.weft = row.weft;
            }
            if row.baseline.median > into.baseline.median {
                into.baseline = row.baseline;
            }
            into.weft_error = worst(into.weft_error, row.weft_error);
            into.baseline_error = worst(into.baseline_error, row.baseline_error);
        }
    }
    merged
}

/// The larger error, NaN counting as the worst.
fn worst(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}
