//! What the tensor-parallel GEMM examples (08 all-gather + GEMM, 09 GEMM + reduce-scatter) measure and print: per
//! shape, the fused kernel's time against the unfused collective + the same GEMM kernel and + cuBLAS, and its
//! errors against the f64 host reference and the unfused result.

use half::bf16;

use crate::common::{self, Real, Result};

/// One shape's results on one rank.
#[derive(Debug, Clone)]
pub struct GemmCase {
    /// `(rows per rank, n, k)`.
    pub shape: (usize, usize, usize),
    /// Median µs: fused, unfused with the same GEMM kernel, unfused with cuBLAS (NaN without it).
    pub times: [f64; 3],
    /// Relative error against the f64 reference (`None` where not checked), and against the unfused result.
    pub errors: (Option<f64>, f64),
}

impl GemmCase {
    /// Whether both errors pass for bf16 (an unchecked reference passes).
    pub fn passed(&self) -> bool {
        self.errors.0.is_none_or(common::passes::<bf16>) && common::passes::<bf16>(self.errors.1)
    }
}

/// Prints rank `first`'s times with TFLOP/s (`flops(shape)` per call) and the worst errors over `reports` (one per
/// rank, in rank order), then the verdict; `unfused` names the collective (`AG`, `RS`).
pub fn print(
    reports: &[Vec<GemmCase>],
    first: usize,
    unfused: &str,
    flops: impl Fn((usize, usize, usize)) -> f64,
) -> Result<()> {
    let nranks = reports.len();
    println!("\nrank {first}'s median times in µs (every rank's result is checked); TFLOP/s of its GEMM\n");
    println!(
        "{:>20} | {:>9} {:>10} {:>11} | {:>8} {:>8} | {:>14} {:>14} | {:>8} {:>8}",
        "rows/rank x n x k",
        "fused",
        format!("{unfused}+GEMM"),
        format!("{unfused}+cuBLAS"),
        "TFLOP/s",
        "cuBLAS",
        "(unf. GEMM)/fused",
        "(cuBLAS)/fused",
        "err ref",
        "err unf"
    );
    for (c, case) in reports[0].iter().enumerate() {
        let (shard, n, k) = case.shape;
        let flops = flops(case.shape);
        let reference: Vec<f64> = reports.iter().filter_map(|r| r[c].errors.0).collect();
        let reference = if reference.is_empty() { f64::NAN } else { common::worst(reference) };
        let unfused_error = common::worst(reports.iter().map(|r| r[c].errors.1));
        println!(
            "{:>20} | {:>9.1} {:>10.1} {:>11.1} | {:>8.1} {:>8.1} | {:>13.2}x {:>13.2}x | {:>8.1e} {:>8.1e}",
            format!("{shard}x{n}x{k}"),
            case.times[0],
            case.times[1],
            case.times[2],
            flops / case.times[0] / 1e6,
            flops / case.times[2] / 1e6,
            case.times[1] / case.times[0],
            case.times[2] / case.times[0],
            reference,
            unfused_error,
        );
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
    common::verdict(&failed, "bf16 < 1e-2 against the f64 reference and against the unfused result")
}

/// The examples' start: says whether cuBLAS is there (its baseline is skipped otherwise), and computes every rank's
/// f64 reference for the first `checked` shapes `(m, n, k)` with `reference(nranks, rank, m / nranks, n, k)`;
/// returns whether cuBLAS is there and `references[shape][rank]`.
pub fn start(
    shapes: &[(usize, usize, usize)],
    checked: usize,
    nranks: usize,
    reference: impl Fn(usize, usize, usize, usize, usize) -> Vec<f64>,
) -> (bool, Vec<Vec<Vec<f64>>>) {
    let cublas = crate::blas::available();
    if !cublas {
        println!("{}: the cuBLAS baseline is skipped (the others run)", crate::blas::MISSING);
    }
    println!("{nranks} rank(s); computing the host references for the first {checked} shapes...");
    let references = shapes[..checked]
        .iter()
        .map(|&(m, n, k)| (0..nranks).map(|rank| reference(nranks, rank, m / nranks, n, k)).collect())
        .collect();
    (cublas, references)
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
