//! What to run: element types, message sizes, iteration counts, and the environment knobs that choose them.
//!
//! Pure (no GPU); `tests/bench_harness.rs` tests it.

use std::path::PathBuf;

/// The copy ceiling measured on the H200 (device-to-device copy, bytes read + bytes written), in GB/s: the limit of
/// a one-rank run, where every byte stays in the GPU's memory.
pub const DEFAULT_LIMIT_GBPS: f64 = 4300.0;

/// NVLink 4 on the H200, per direction per GPU, in GB/s: the limit of a run with several ranks, whose traffic
/// crosses NVLink.
pub const NVLINK_LIMIT_GBPS: f64 = 450.0;

/// Where the CSV and SVG go unless `WEFT_BENCH_OUT` says otherwise (relative to the working directory, which
/// `cargo bench` sets to the workspace root).
pub const DEFAULT_OUT_DIR: &str = "target/bench";

/// An element type the fused kernels are instantiated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// `f32`.
    F32,
    /// `half::bf16`.
    Bf16,
}

impl Dtype {
    /// Every element type, in table order.
    pub const ALL: [Dtype; 2] = [Dtype::F32, Dtype::Bf16];

    /// The Rust name (also the entry-point suffix of generic weft kernels).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
        }
    }

    /// The largest relative error a result may have against the f64 reference: f32 arithmetic lands far
    /// under 1e-5, bf16 storage and accumulation under 1e-2.
    pub fn default_tolerance(self) -> f64 {
        match self {
            Dtype::F32 => 1e-5,
            Dtype::Bf16 => 1e-2,
        }
    }

    /// Parses `f32` / `bf16` (case-insensitive).
    pub fn parse(text: &str) -> Result<Dtype, String> {
        Dtype::ALL
            .into_iter()
            .find(|dtype| dtype.name().eq_ignore_ascii_case(text.trim()))
            .ok_or_else(|| format!("unknown element type {text:?}; use f32 or bf16"))
    }
}

/// The run's settings, read from the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// `WEFT_BENCH_QUICK=1`: three sizes, few iterations: a smoke run, not a measurement.
    pub quick: bool,
    /// `WEFT_BENCH_GRAPH=1`: each side is captured once per input set into a CUDA graph and replayed (cases that
    /// cannot be captured are skipped, saying why).
    pub graph: bool,
    /// `WEFT_BENCH_CASES=a,b`: only these cases (`None`: all).
    pub cases: Option<Vec<String>>,
    /// `WEFT_BENCH_DTYPES=f32,bf16`.
    pub dtypes: Vec<Dtype>,
    /// Message sizes in bytes per rank (`WEFT_BENCH_SIZES=4K,1M,256M`, else the defaults below).
    pub sizes: Vec<usize>,
    /// `WEFT_BENCH_OUT`: directory for `fused.csv` and `fused.svg`.
    pub out_dir: PathBuf,
    /// `WEFT_BENCH_LIMIT_GBPS`: the bandwidth the "% of limit" column divides by; `None`: by rank count (see
    /// [`Options::limit_for`]).
    pub limit_gbps: Option<f64>,
    /// `WEFT_BENCH_SETTLE_S`: how long a rank waits for one check run or timed batch before it ends with
    /// `Error::Stalled`, in whole seconds above zero (`None`: the benchmark's default).
    pub settle: Option<std::time::Duration>,
}

impl Options {
    /// The "% of limit" denominator for a run on `nranks` ranks, `ranks_per_gpu` of them on each GPU:
    /// `WEFT_BENCH_LIMIT_GBPS` if set, else the memory copy rate on one rank, each rank's share of it when ranks
    /// share one GPU (a proxy: their traffic never leaves the GPU), and the NVLink rate on one rank per GPU.
    pub fn limit_for(&self, nranks: usize, ranks_per_gpu: usize) -> f64 {
        self.limit_gbps.unwrap_or(if ranks_per_gpu > 1 {
            DEFAULT_LIMIT_GBPS / ranks_per_gpu as f64
        } else if nranks <= 1 {
            DEFAULT_LIMIT_GBPS
        } else {
            NVLINK_LIMIT_GBPS
        })
    }

    /// Reads the `WEFT_BENCH_*` variables.
    pub fn from_env() -> Result<Options, String> {
        Options::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the knobs through `get` (the environment, or a table in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Options, String> {
        let set = |name: &str| get(name).map(|value| value.trim().to_string()).filter(|value| !value.is_empty());
        let quick = match set("WEFT_BENCH_QUICK").as_deref() {
            None | Some("0") | Some("false") | Some("no") => false,
            Some("1") | Some("true") | Some("yes") => true,
            Some(other) => return Err(format!("WEFT_BENCH_QUICK={other:?}: use 1 or 0")),
        };
        let graph = match set("WEFT_BENCH_GRAPH").as_deref() {
            None | Some("0") | Some("false") | Some("no") => false,
            Some("1") | Some("true") | Some("yes") => true,
            Some(other) => return Err(format!("WEFT_BENCH_GRAPH={other:?}: use 1 or 0")),
        };
        let cases = set("WEFT_BENCH_CASES").map(|list| list_items(&list).map(str::to_string).collect::<Vec<_>>());
        let dtypes = match set("WEFT_BENCH_DTYPES") {
            Some(list) => list_items(&list).map(Dtype::parse).collect::<Result<Vec<_>, _>>()?,
            None => Dtype::ALL.to_vec(),
        };
        let sizes = match set("WEFT_BENCH_SIZES") {
            Some(list) => list_items(&list).map(parse_size).collect::<Result<Vec<_>, _>>()?,
            None if quick => quick_sizes(),
            None => default_sizes(),
        };
        if dtypes.is_empty() || sizes.is_empty() {
            return Err("WEFT_BENCH_DTYPES and WEFT_BENCH_SIZES must each name at least one item".into());
        }
        let limit_gbps = match set("WEFT_BENCH_LIMIT_GBPS") {
            Some(text) => match text.parse::<f64>() {
                Ok(value) if value > 0.0 && value.is_finite() => Some(value),
                _ => return Err(format!("WEFT_BENCH_LIMIT_GBPS={text:?}: give a positive number of GB/s")),
            },
            None => None,
        };
        let settle = match set("WEFT_BENCH_SETTLE_S") {
            Some(text) => match text.parse::<u64>() {
                Ok(seconds) if seconds > 0 => Some(std::time::Duration::from_secs(seconds)),
                _ => return Err(format!("WEFT_BENCH_SETTLE_S={text:?}: give a whole number of seconds above 0")),
            },
            None => None,
        };
        let out_dir = PathBuf::from(set("WEFT_BENCH_OUT").unwrap_or_else(|| DEFAULT_OUT_DIR.to_string()));
        Ok(Options { quick, graph, cases, dtypes, sizes, out_dir, limit_gbps, settle })
    }

    /// Whether the case filter lets `case` run.
    pub fn selects(&self, case: &str) -> bool {
        self.cases.as_ref().is_none_or(|names| names.iter().any(|name| name == case))
    }

    /// Cases named in `WEFT_BENCH_CASES` that are not among `known`: a typo would otherwise run nothing.
    pub fn unknown_cases<'a>(&'a self, known: &[&str]) -> Vec<&'a str> {
        self.cases.iter().flatten().map(String::as_str).filter(|name| !known.contains(name)).collect()
    }

    /// Untimed runs before the timed ones (module load, NCCL's first-use setup, clocks ramping up).
    pub fn warmup(&self) -> usize {
        if self.quick {
            3
        } else {
            10
        }
    }

    /// Timed runs of each side at `bytes` per rank: many where a run is short and the spread relatively large.
    pub fn iterations(&self, bytes: usize) -> usize {
        match (self.quick, bytes) {
            (true, _) => 10,
            (false, b) if b <= 1 << 20 => 200,
            (false, b) if b <= 16 << 20 => 100,
            _ => 50,
        }
    }
}

fn list_items(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|item| !item.is_empty())
}

/// 4 KB, 16 KB, … 256 MB: powers of 4.
pub fn default_sizes() -> Vec<usize> {
    (0..9).map(|step| (4 << 10) << (2 * step)).collect()
}

/// One small (latency-bound), one medium, one large (bandwidth-bound) size.
pub fn quick_sizes() -> Vec<usize> {
    vec![64 << 10, 4 << 20, 64 << 20]
}

/// Parses `4096`, `4K`, `4KB`, `16M`, `1G` (binary multiples, case-insensitive).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let upper = text.trim().to_ascii_uppercase();
    let digits_end = upper.find(|c: char| !c.is_ascii_digit()).unwrap_or(upper.len());
    let (digits, unit) = upper.split_at(digits_end);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(format!("size {text:?}: use a number with an optional K, M or G (4K, 16M, 1G)")),
    };
    let value: usize = digits.parse().map_err(|_| format!("size {text:?}: no number"))?;
    match value.checked_mul(1 << shift) {
        Some(0) | None => Err(format!("size {text:?}: must be positive and fit in memory")),
        Some(bytes) => Ok(bytes),
    }
}

/// `4 KB`, `256 MB`, `1 GB`, `1536 B` (binary multiples; exact, else the next smaller unit).
pub fn format_size(bytes: usize) -> String {
    for (shift, unit) in [(30, "GB"), (20, "MB"), (10, "KB")] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} B")
}
