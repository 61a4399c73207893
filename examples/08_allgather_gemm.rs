//! The column-parallel linear layer of tensor parallelism — all-gather the activations, then multiply by this
//! rank's slice of the weights — as one weft kernel that reads the other ranks' rows over LSA tile by tile as its
//! GEMM consumes them, against `ncclAllGather` + a separate GEMM, on every visible GPU.
//!
//! ```sh
//! cargo run --release --example allgather_gemm
//! ```
//!
//! `out (m × n) = all_gather(x) (m × k) × w (k × n)` in bf16 with f32 accumulation, `x` sharded by rows (rank `r`
//! holds rows `r·m/R ..`), `w` this rank's own `k × n` column slice. The variants, timed with CUDA events (median of
//! 10 after 2 warm-up rounds, interleaved):
//!
//! - fused (`kernels/gemm_tp.rs`, `allgather_gemm`): one kernel; each block's 128 × 128 output tile streams its rows of
//!   `x` from the owner's window (`x.lsa(owner).gemm_block(…)`, device/src/gemm.rs) — no gathered copy is written;
//! - unfused, same GEMM: `ncclAllGather(x -> gathered)`, then the same mainloop as a plain kernel (kit's
//!   `gemm_tiles`): what fusing the all-gather saves, with nothing else changed;
//! - unfused, cuBLAS: `ncclAllGather`, then `cublasGemmEx` (where libcublas is on the library path).
//!
//! Checks: at the small shapes every rank's fused result against an f64 host reference; at every shape the fused
//! result against the unfused one (outputs poisoned with NaN first). Sizes need `m / R` and `n` multiples of 128
//! and `k` of 32 (the mainloop's tile). Ranks sharing one GPU (`WEFT_RANKS=n`) are a proxy: they share its SMs and
//! memory, so the figures show what the all-gather's copy and the launches cost, not NVLink overlap.
//!
//! On a machine without a GPU it compiles the kernels with nvcc against every NCCL release's headers it finds, says
//! so, and exits 0.

use weft_kit::common;
use weft_kit::gemm_report::{self, GemmCase};
use weft_kit::kernels::gemm_tp::allgather_gemm as fused;
use weft_kit::test_kernels::gemm_tiles;

use common::{Real, Result};
use half::bf16;
use weft::host::caps::Lsa;
use weft::host::{Config, DevComm, LaunchConfig, WindowFlags};

/// `(m, n, k)`, `m` over all ranks (each holds `m / R` rows: a multiple of 128 up to 8 ranks; the work per rank
/// stays the same as ranks are added, so ranks sharing one GPU multiply the total); the first two are checked
/// against the f64 host reference.
const SHAPES: &[(usize, usize, usize)] = &[(1024, 256, 256), (2048, 128, 512), (4096, 1024, 4096), (8192, 2048, 4096)];
const CHECKED: usize = 2;
const BLOCK: u32 = 256;
const WARMUP: usize = 2;
const ITERATIONS: usize = 10;

fn main() -> Result<()> {
    println!("weft example 08 — all-gather + GEMM (column-parallel linear), fused over LSA vs ncclAllGather + GEMM\n");
    match common::gpus() {
        Ok(_) => run(),
        Err(why) => common::without_gpu(
            &why,
            &[fused::compile_check, gemm_tiles::compile_check],
            &[],
            &format!(
                "runs one rank per GPU (WEFT_RANKS=n runs n) and, for (m, n, k) in {SHAPES:?}, computes \
                 all_gather(x) x w in bf16 with the fused kernel, with ncclAllGather + the same GEMM kernel and with \
                 ncclAllGather + cuBLAS, checks them against an f64 host reference and each other, and prints their \
                 median times and TFLOP/s."
            ),
        ),
    }
}

fn x_seed(rank: usize) -> u64 {
    3000 + rank as u64
}
fn w_seed(rank: usize) -> u64 {
    4000 + rank as u64
}

/// Rank `rank`'s f64 reference: every rank's rows of `x`, in rank order, times its own `w`.
fn reference(nranks: usize, rank: usize, shard: usize, n: usize, k: usize) -> Vec<f64> {
    let w: Vec<f64> = common::random_as::<bf16>(k * n, w_seed(rank)).iter().map(|v| v.value()).collect();
    let mut out = Vec::with_capacity(nranks * shard * n);
    for owner in 0..nranks {
        let x: Vec<f64> = common::random_as::<bf16>(shard * k, x_seed(owner)).iter().map(|v| v.value()).collect();
        for row in 0..shard {
            let mut acc = vec![0.0f64; n];
            for p in 0..k {
                let a = x[row * k + p];
                for (o, b) in acc.iter_mut().zip(&w[p * n..(p + 1) * n]) {
                    *o += a * b;
                }
            }
            out.extend(acc);
        }
    }
    out
}

fn run() -> Result<()> {
    let ranks = common::Ranks::from_env()?;
    let nranks = ranks.nranks();
    let (cublas, references) = gemm_report::start(SHAPES, CHECKED, nranks, reference);
    let reports = ranks.run(&Config::new(), |comm| {
        // The fused kernel reaches every rank through LSA: across nodes it cannot.
        common::require_one_lsa_team(comm)?;
        let s = comm.context().new_stream()?;
        let cfg = fused::one_wave::<bf16>(comm, &s, BLOCK)?;
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&fused::requirements(&cfg))?;
        let blas = weft_kit::blas::handle(&s)?;
        if comm.rank() == 0 {
            println!(
                "launch geometry: fused {} blocks of {BLOCK} (one wave), unfused one block per 128 x 128 tile",
                cfg.grid_dim.0
            );
        }
        let stopwatch = common::Stopwatch::new(comm.context())?;
        let mut cases = Vec::new();
        for (index, &(m, n, k)) in SHAPES.iter().enumerate() {
            let (rank, shard) = (comm.rank(), m / nranks);
            if !gemm_report::runs(rank, (m, n, k), nranks) {
                continue;
            }
            let mut x = comm.alloc_window::<bf16>(&s, shard * k, WindowFlags::COLL_SYMMETRIC)?;
            x.buffer_mut().copy_from_host(&common::random_as::<bf16>(shard * k, x_seed(rank)))?;
            let w = s.clone_htod(&common::random_as::<bf16>(k * n, w_seed(rank)))?;
            let poison = vec![bf16::NAN; m * n];
            let mut out = s.clone_htod(&poison)?;
            let mut out_unfused = s.clone_htod(&poison)?;
            let mut gathered = s.alloc_zeros::<bf16>(m * k)?;
            let tiles_cfg = LaunchConfig::linear(u32::try_from((m / 128) * (n / 128)).unwrap_or(u32::MAX), BLOCK);

            fused::launch(&s, cfg, &dev, &x, &w, &mut out, m, n, k)?;
            let got = weft::host::cuda::download(&s, &out)?;
            comm.all_gather(x.buffer(), &mut gathered, &s)?;
            gemm_tiles::launch(&s, tiles_cfg, &gathered, &w, &mut out_unfused, m, n, k)?;
            let unfused = weft::host::cuda::download(&s, &out_unfused)?;
            let against_reference = (index < CHECKED).then(|| common::relative_error(&got, &references[index][rank]));
            let unfused_f64: Vec<f64> = unfused.iter().map(|v| v.value()).collect();
            let against_unfused = common::relative_error(&got, &unfused_f64);

            let times = common::time_variants(&stopwatch, &s, WARMUP, ITERATIONS, 3, |variant| match variant {
                0 => fused::launch(&s, cfg, &dev, &x, &w, &mut out, m, n, k),
                1 => {
                    comm.all_gather(x.buffer(), &mut gathered, &s)?;
                    gemm_tiles::launch(&s, tiles_cfg, &gathered, &w, &mut out_unfused, m, n, k)
                }
                _ => match &blas {
                    Some(blas) => {
                        comm.all_gather(x.buffer(), &mut gathered, &s)?;
                        weft_kit::blas::gemm(blas, &gathered, &w, &mut out_unfused, (m, n, k))
                    }
                    None => Ok(()),
                },
            })?;
            let times = [times[0], times[1], if cublas { times[2] } else { f64::NAN }];
            cases.push(GemmCase { shape: (shard, n, k), times, errors: (against_reference, against_unfused) });
        }
        weft::host::cuda::settle(&s)?;
        Ok(cases)
    })?;

    gemm_report::print(&reports, ranks.first_rank(), "AG", |(shard, n, k)| 2.0 * (shard * nranks * n * k) as f64)
}
