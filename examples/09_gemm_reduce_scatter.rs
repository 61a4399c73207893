//! The row-parallel linear layer of tensor parallelism — multiply this rank's slice of the inner dimension, then
//! reduce-scatter the partial products by rows — as one weft kernel that sends each output tile from its registers
//! into the owner's window, against a GEMM + `ncclReduceScatter`, on every visible GPU.
//!
//! ```sh
//! cargo run --release --example gemm_reduce_scatter
//! ```
//!
//! Rank `r` holds `x_r (m × k)` and `w_r (k × n)` (its slice of the inner dimension) and gets rows
//! `r·m/R .. (r+1)·m/R` of `Σ_r x_r × w_r`, in bf16 with f32 accumulation. The variants, timed with CUDA events
//! (median of 10 after 2 warm-up rounds, interleaved):
//!
//! - fused (`kernels/gemm_tp.rs`, `gemm_reduce_scatter`): one kernel; each block's 128 × 128 partial tile goes straight
//!   into the owning rank's f32 scratch window (this rank's slot), then, after an LSA barrier, every rank sums the
//!   slots of its rows in rank order — the partial product is never written whole, and the sum is taken in f32;
//! - unfused, same GEMM: kit's `gemm_tiles` (the same mainloop as a plain kernel) into a bf16 partial product, then
//!   `ncclReduceScatter` of it: what fusing the reduce-scatter saves, with nothing else changed;
//! - unfused, cuBLAS: `cublasGemmEx`, then `ncclReduceScatter` (where libcublas is on the library path);
//! - fused tiles (`kernels/gemm_tp.rs`, `gemm_tiles_reduce_scatter`, on the persistent `gemm_tiles` loop: TMA and
//!   `wgmma` on Hopper, `cp.async` and `mma.sync` elsewhere or with `WEFT_GEMM_MAINLOOP=mma_sync`; where the GPU
//!   runs the loop, `n` is a multiple of 256 and `k` of 64): 128 × 256 tiles, each partial tile stored whole into its
//!   owner's bf16 scratch window (`gemm_store`), the owner's sum 16 bytes at a time. The selector's default above 1G
//!   multiply-adds at 2 to 4 ranks (H100, 2026-12-05: 1.08–1.73× cuBLAS + `ncclReduceScatter` there).
//!
//! Checks: at the small shapes every rank's fused result against an f64 host reference; at every shape against the
//! unfused one (outputs poisoned with NaN first; the unfused path rounds the partial products to bf16 before
//! summing, so the two differ by that rounding). `m / R` and `n` multiples of 128, `k` of 32. Ranks sharing one GPU
//! (`WEFT_RANKS=n`) are a proxy: they share its SMs and memory, so the figures show what the reduce-scatter's extra
//! pass and the launches cost, not NVLink overlap.
//!
//! A selector (kit's `select.rs`, measured defaults, `WEFT_GEMM_RS_PATHS` replaces them) says which path each shape
//! takes in a program; the table prints its pick and the pick's speedup over NCCL + cuBLAS.
//!
//! On a machine without a GPU it compiles the kernels with nvcc against every NCCL release's headers it finds, says
//! so, and exits 0.

use weft_kit::common;
use weft_kit::gemm_report::{self, GemmCase};
use weft_kit::kernels::gemm_tp::gemm_reduce_scatter as fused;
use weft_kit::kernels::gemm_tp::gemm_tiles_reduce_scatter as fused_tiles;
use weft_kit::select::{GemmReduceScatter, GemmRsTable};
use weft_kit::test_kernels::gemm_tiles;

use common::{Real, Result};
use half::bf16;
use weft::host::caps::Lsa;
use weft::host::{Config, DevComm, LaunchConfig, ReduceOp, WindowFlags};

/// `(m, n, k)`, `m` over all ranks (each holds `m / R` rows: a multiple of 128 up to 8 ranks; the work per rank
/// stays the same as ranks are added, so ranks sharing one GPU multiply the total); the first two are checked
/// against the f64 host reference.
const SHAPES: &[(usize, usize, usize)] = &[(1024, 256, 256), (2048, 128, 512), (4096, 4096, 1024), (8192, 8192, 1024)];
const CHECKED: usize = 2;
const BLOCK: u32 = 256;
const WARMUP: usize = 2;
const ITERATIONS: usize = 10;

fn main() -> Result<()> {
    println!(
        "weft example 09 — GEMM + reduce-scatter (row-parallel linear), fused over LSA vs GEMM + ncclReduceScatter\n"
    );
    match common::gpus() {
        Ok(_) => run(),
        Err(why) => common::without_gpu(
            &why,
            &[fused::compile_check, gemm_tiles::compile_check, fused_tiles::compile_check],
            &[],
            &format!(
                "runs one rank per GPU (WEFT_RANKS=n runs n) and, for (m, n, k) in {SHAPES:?}, computes this \
                 rank's rows of the sum over ranks of x x w in bf16 with the fused kernel, with the same GEMM kernel + \
                 ncclReduceScatter, with cuBLAS + ncclReduceScatter and (where the GPU runs it) with the fused \
                 kernel on the persistent gemm_tiles loop, checks them against an f64 host \
                 reference and each other, and prints their median times and TFLOP/s."
            ),
        ),
    }
}

fn x_seed(rank: usize) -> u64 {
    5000 + rank as u64
}
fn w_seed(rank: usize) -> u64 {
    6000 + rank as u64
}

/// Rank `rank`'s f64 reference: its `m/R` rows of `Σ_s x_s × w_s`.
fn reference(nranks: usize, rank: usize, shard: usize, n: usize, k: usize) -> Vec<f64> {
    let m = shard * nranks;
    let mut out = vec![0.0f64; shard * n];
    for s in 0..nranks {
        let x: Vec<f64> = common::random_as::<bf16>(m * k, x_seed(s)).iter().map(|v| v.value()).collect();
        let w: Vec<f64> = common::random_as::<bf16>(k * n, w_seed(s)).iter().map(|v| v.value()).collect();
        for row in 0..shard {
            let acc = &mut out[row * n..(row + 1) * n];
            for p in 0..k {
                let a = x[(rank * shard + row) * k + p];
                for (o, b) in acc.iter_mut().zip(&w[p * n..(p + 1) * n]) {
                    *o += a * b;
                }
            }
        }
    }
    out
}

fn run() -> Result<()> {
    let ranks = common::Ranks::from_env()?;
    let nranks = ranks.nranks();
    // A malformed `WEFT_GEMM_RS_PATHS` is refused before any rank starts; each rank then takes the rules for the GEMM
    // mainloop its GPU runs (kit's select.rs), rank 0 printing them.
    GemmRsTable::from_env()?;
    let references = gemm_report::start(SHAPES, CHECKED, nranks, reference);
    let reports = ranks.run(&Config::new(), |comm| {
        // The fused kernel reaches every rank through LSA: across nodes it cannot.
        common::require_one_lsa_team(comm, "this example")?;
        let s = comm.context().new_stream()?;
        let cfg = fused::one_wave::<bf16>(comm, &s, BLOCK)?;
        // The persistent loop where the GPU runs it; its grid is the rank's share of the GPU at most (every rank's
        // blocks wait at LSA barriers for each other), sized here for the largest shape.
        let (most_m, most_n, _) = SHAPES.iter().copied().max_by_key(|&(m, n, _)| m * n).unwrap_or((128, 256, 64));
        let most = common::gemm_tiles_here(comm, &s, most_m, most_n)?;
        // Every kernel this rank launches is loaded before the first collective setup call (docs/multi-rank.md,
        // "Load before launch").
        gemm_tiles::function::<bf16>(comm.context())?;
        let mut needs = fused::requirements(&cfg);
        if let Some(most) = &most {
            fused_tiles::function::<bf16>(comm.context())?;
            needs = needs.merge(&fused_tiles::requirements(most));
        }
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&needs)?;
        let blas = weft_kit::blas::handle(&s)?;
        // The measured rules for the mainloop this GPU runs (or the user's, from the environment).
        let paths = GemmRsTable::from_env_on(common::gemm_mainloop(comm.context())?)?;
        if comm.rank() == 0 {
            println!("selector: {paths} (m x n x k multiply-adds; {} replaces it)", GemmRsTable::ENV);
            println!(
                "launch geometry: fused {} blocks of {BLOCK} (one wave), unfused GEMM one block per 128 x 128 tile; \
                 fused tiles: {}",
                cfg.grid_dim.0,
                if most.is_some() { common::gemm_tiles_loop(comm.context())? } else { "not on this GPU" }
            );
        }
        let stopwatch = common::Stopwatch::new(comm.context())?;
        let mut cases = Vec::new();
        for (index, &(m, n, k)) in SHAPES.iter().enumerate() {
            let (rank, shard) = (comm.rank(), m / nranks);
            if !gemm_report::runs(rank, (m, n, k), nranks) {
                continue;
            }
            let x = s.clone_htod(&common::random_as::<bf16>(m * k, x_seed(rank)))?;
            let w = s.clone_htod(&common::random_as::<bf16>(k * n, w_seed(rank)))?;
            let scratch = comm.alloc_window::<f32>(&s, m * n, WindowFlags::COLL_SYMMETRIC)?;
            let poison = vec![bf16::NAN; shard * n];
            let mut out = s.clone_htod(&poison)?;
            let mut out_unfused = s.clone_htod(&poison)?;
            let mut partial = s.alloc_zeros::<bf16>(m * n)?;
            // The persistent loop's shape rules (m / R a multiple of 128 holds for every shape here).
            let tiles = most.is_some() && n % 256 == 0 && k % 64 == 0;
            let mut out_tiles = s.clone_htod(&poison)?;
            // Its scratch window, operands and grid, where it runs.
            let tiles_rs = if tiles {
                Some((
                    comm.alloc_window::<bf16>(&s, m * n, WindowFlags::COLL_SYMMETRIC)?,
                    weft::host::launch::TmaOperand::gemm_a(&x, m, k, k)?,
                    weft::host::launch::TmaOperand::gemm_b(&w, k, n, n)?,
                    weft::host::launch::gemm_tiles_config_shared(comm, &s, m, n)?,
                ))
            } else {
                None
            };
            let tiles_cfg = LaunchConfig::linear(u32::try_from((m / 128) * (n / 128)).unwrap_or(u32::MAX), BLOCK);
            if let Some(blas) = &blas {
                // cuBLAS loads a shape's kernels at its first call: while no peer communicates (docs/multi-rank.md).
                comm.with_gpu_peers_idle(|| {
                    weft_kit::blas::gemm(blas, &x, &w, &mut partial, (m, n, k))?;
                    weft::host::cuda::settle(&s)
                })?;
            }

            fused::launch(&s, cfg, &dev, &x, &w, &scratch, &mut out, m, n, k)?;
            let got = weft::host::cuda::download(&s, &out)?;
            gemm_tiles::launch(&s, tiles_cfg, &x, &w, &mut partial, m, n, k)?;
            comm.reduce_scatter(&partial, &mut out_unfused, ReduceOp::Sum, &s)?;
            let unfused: Vec<f64> = weft::host::cuda::download(&s, &out_unfused)?.iter().map(|v| v.value()).collect();
            let mut errors = Vec::new();
            if index < CHECKED {
                errors.push(("fused vs f64", common::relative_error(&got, &references[index][rank])));
            }
            errors.push(("fused vs unfused", common::relative_error(&got, &unfused)));
            if let Some((scratch_tiles, tx, tw, tcfg)) = &tiles_rs {
                fused_tiles::launch(&s, *tcfg, &dev, tx, tw, scratch_tiles, &mut out_tiles)?;
                let got_tiles = weft::host::cuda::download(&s, &out_tiles)?;
                if index < CHECKED {
                    errors.push(("fused tiles vs f64", common::relative_error(&got_tiles, &references[index][rank])));
                }
                errors.push(("fused tiles vs unfused", common::relative_error(&got_tiles, &unfused)));
            }

            let times =
                common::time_variants_apart(comm, &stopwatch, &s, WARMUP, ITERATIONS, 4, |variant| match variant {
                    0 => fused::launch(&s, cfg, &dev, &x, &w, &scratch, &mut out, m, n, k),
                    1 => {
                        gemm_tiles::launch(&s, tiles_cfg, &x, &w, &mut partial, m, n, k)?;
                        comm.reduce_scatter(&partial, &mut out_unfused, ReduceOp::Sum, &s)
                    }
                    2 => match &blas {
                        Some(blas) => {
                            weft_kit::blas::gemm(blas, &x, &w, &mut partial, (m, n, k))?;
                            comm.reduce_scatter(&partial, &mut out_unfused, ReduceOp::Sum, &s)
                        }
                        None => Ok(()),
                    },
                    _ => match &tiles_rs {
                        Some((scratch_tiles, tx, tw, tcfg)) => {
                            fused_tiles::launch(&s, *tcfg, &dev, tx, tw, scratch_tiles, &mut out_tiles)
                        }
                        None => Ok(()),
                    },
                })?;
            let times = vec![
                times[0],
                times[1],
                if blas.is_some() { times[2] } else { f64::NAN },
                if tiles { times[3] } else { f64::NAN },
            ];
            // A rule for the tiles kernel where it cannot run (no gemm_tiles loop here, or the shape) falls through.
            let runs = |path| path != GemmReduceScatter::FusedTiles || tiles;
            let picked = match paths.pick_where(m * n * k, nranks, runs) {
                GemmReduceScatter::Fused => 0,
                GemmReduceScatter::FusedTiles => 3,
                GemmReduceScatter::Nccl if blas.is_some() => 2,
                GemmReduceScatter::Nccl => 1,
            };
            cases.push(GemmCase { shape: (shard, n, k), times, errors, picked });
        }
        weft::host::cuda::settle(&s)?;
        Ok(cases)
    })?;
    gemm_report::print(
        &reports,
        ranks.first_rank(),
        &["fused", "GEMM+RS", "cuBLAS+RS", "fused tiles"],
        2,
        |(shard, n, k)| 2.0 * (shard * nranks * n * k) as f64,
    )
}
