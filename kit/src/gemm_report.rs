//! What the tensor-parallel GEMM examples (08 all-gather + GEMM, 09 GEMM + reduce-scatter) measure and print: per
//! shape, the fused kernel's time against the unfused variants (the collective + the same GEMM kernel, + cuBLAS,
//! and in 08 the decoupled all-gather whose chunks gate cuBLAS), and the errors against the f64 host reference and
//! between the variants.

use half::bf16;

use crate::common::{self, Real, Result};

/// One shape's results on one rank.
#[derive(Debug, Clone)]
pub struct GemmCase {
    /// `(rows per rank, n, k)`.
    pub shape: (usize, usize, usize),
    /// Median µs per variant, the fused kernel first (NaN for a variant that did not run: cuBLAS missing).
    pub times: Vec<f64>,
    /// Relative errors: `(what, error)`, e.g. the fused result against the f64 reference, against the unfused one.
    pub errors: Vec<(&'static str, f64)>,
    /// The variant the selector picks for this shape (an index into `times`; `crate::select`).
    pub picked: usize,
}

impl GemmCase {
    /// Whether every error passes for bf16.
    pub fn passed(&self) -> bool {
        self.errors.iter().all(|(_, e)| common::passes::<bf16>(*e))
    }
}

/// Prints rank `first`'s times (`variants` names them, the fused kernel first) with the fused kernel's TFLOP/s
/// (`flops(shape)` per call) and each variant's time over the fused one, the selector's pick with its speedup over
/// variant `baseline` (NCCL + cuBLAS; variant 1, NCCL + the same GEMM, where cuBLAS did not run), the worst errors
/// over `reports` (one per rank, in rank order), then the verdict.
pub fn print(
    reports: &[Vec<GemmCase>],
    first: usize,
    variants: &[&str],
    baseline: usize,
    flops: impl Fn((usize, usize, usize)) -> f64,
) -> Result<()> {
    let nranks = reports.len();
    println!(
        "\nrank {first}'s median times in µs (every rank's result is checked); TFLOP/s of the fused kernel; x = a \
         variant's time over the fused kernel's (above 1: fusing wins)\n"
    );
    let mut header = format!("{:>20} |", "rows/rank x n x k");
    for v in variants {
        header += &format!(" {v:>12}");
    }
    header += &format!(" | {:>8} |", "TFLOP/s");
    for v in &variants[1..] {
        header += &format!(" {:>12}", format!("{v} x"));
    }
    println!("{header} | {:>10} {:>8} | worst errors", "picked", "speedup");
    for (c, case) in reports[0].iter().enumerate() {
        let (shard, n, k) = case.shape;
        let mut line = format!("{:>20} |", format!("{shard}x{n}x{k}"));
        for t in &case.times {
            line += &format!(" {t:>12.1}");
        }
        line += &format!(" | {:>8.1} |", flops(case.shape) / case.times[0] / 1e6);
        for t in &case.times[1..] {
            line += &format!(" {:>11.2}x", t / case.times[0]);
        }
        let base = if case.times[baseline].is_nan() { case.times[1] } else { case.times[baseline] };
        line += &format!(" | {:>10} {:>7.2}x", variants[case.picked], base / case.times[case.picked]);
        let errors: Vec<String> = case
            .errors
            .iter()
            .enumerate()
            .map(|(e, (what, _))| format!("{what} {:.1e}", common::worst(reports.iter().map(|r| r[c].errors[e].1))))
            .collect();
        println!("{line} | {}", errors.join(", "));
    }
    let failed: Vec<String> = reports
        .iter()
        .enumerate()
        .flat_map(|(index, cases)| {
            cases.iter().filter(|c| !c.passed()).map(move |c| {
                format!("rank {} {:?}: errors {:?} (limit {})", first + index, c.shape, c.errors, bf16::TOLERANCE)
            })
        })
        .collect();
    println!("({nranks} rank(s) reported)");
    common::verdict(&failed, "bf16 < 1e-2 against the f64 reference and between the variants")
}

/// The examples' start: says when cuBLAS is missing (its baselines are skipped; each rank's `blas::handle` is then
/// `None`), and computes every rank's f64 reference for the first `checked` shapes `(m, n, k)` with
/// `reference(nranks, rank, m / nranks, n, k)`: `references[shape][rank]`.
pub fn start(
    shapes: &[(usize, usize, usize)],
    checked: usize,
    nranks: usize,
    reference: impl Fn(usize, usize, usize, usize, usize) -> Vec<f64>,
) -> Vec<Vec<Vec<f64>>> {
    if !crate::blas::available() {
        println!("{}: the cuBLAS baselines are skipped (the others run)", crate::blas::MISSING);
    }
    println!("{nranks} rank(s); computing the host references for the first {checked} shapes...");
    shapes[..checked]
        .iter()
        .map(|&(m, n, k)| (0..nranks).map(|rank| reference(nranks, rank, m / nranks, n, k)).collect())
        .collect()
}

/// Whether `m × n × k` splits over `nranks` as the fused kernels need (`gemm_tp::check_shape`); rank 0 says why
/// not, and the shape is skipped on every rank.
pub fn runs(rank: usize, (m, n, k): (usize, usize, usize), nranks: usize) -> bool {
    match crate::kernels::gemm_tp::check_shape(m, n, k, nranks) {
        Ok(()) => true,
        Err(why) => {
            if rank == 0 {
                println!("skipped {m} x {n} x {k} on {nranks} ranks: {why}");
            }
            false
        }
    }
}
