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
//! - unfused, cuBLAS: `ncclAllGather`, then `cublasGemmEx` (where libcublas is on the library path);
//! - decoupled (PyTorch's async-TP shape; where libcublas is): a weft kernel on a second stream copies the shards
//!   into a local buffer 128 rows at a time and raises a flag per chunk (`allgather_signal`), and each shard's cuBLAS
//!   GEMM on the main stream waits only for its own chunks' flags (`DeviceBuffer::stream_wait_at_least`), this
//!   rank's shard first: communication and GEMMs overlap, with cuBLAS doing the math;
//! - fused tiles (`kernels/gemm_tp.rs`, `allgather_gemm_tiles`, on the persistent `gemm_tiles` loop: TMA and `wgmma`
//!   on Hopper, `cp.async` and `mma.sync` elsewhere or with `WEFT_GEMM_MAINLOOP=mma_sync`; where the GPU runs the loop,
//!   `n` is a multiple of 256 and `k` of 64, and with NCCL 2.29+ when there are several ranks): 128 × 256 tiles, the
//!   loop's producer reading each tile's rows of `x` straight from the owner's window (`TmaShards`: one tensor map
//!   and one address per rank), each rank starting with its own rows, each tile stored whole (`gemm_store`). The
//!   selector's default for 256M to 32G multiply-adds, and above at 1 and 2 ranks (H100, 2026-12-05: 1.12–1.56× the
//!   best other path there).
//!
//! Checks: at the small shapes every rank's fused result against an f64 host reference; at every shape the fused
//! result against the unfused one (outputs poisoned with NaN first). Sizes need `m / R` and `n` multiples of 128
//! and `k` of 32 (the mainloop's tile). Ranks sharing one GPU (`WEFT_RANKS=n`) are a proxy: they share its SMs and
//! memory, so the figures show what the all-gather's copy and the launches cost, not NVLink overlap.
//!
//! A selector (kit's `select.rs`, measured defaults, `WEFT_AG_GEMM_PATHS` replaces them) says which path each shape
//! takes in a program; the table prints its pick and the pick's speedup over NCCL + cuBLAS.
//!
//! On a machine without a GPU it compiles the kernels with nvcc against every NCCL release's headers it finds, says
//! so, and exits 0.

use weft_kit::blas::Part;
use weft_kit::common;
use weft_kit::gemm_report::{self, GemmCase};
use weft_kit::kernels::gemm_tp::{
    allgather_gemm as fused, allgather_gemm_tiles as fused_tiles, allgather_signal as signal,
};
use weft_kit::select::{AgGemmTable, AllGatherGemm};
use weft_kit::test_kernels::gemm_tiles;

use common::{Real, Result};
use cudarc::driver::CudaSlice;
use half::bf16;
use weft::host::caps::Lsa;
use weft::host::{Config, DevComm, DeviceBuffer, Error, LaunchConfig, WindowFlags};

/// `(m, n, k)`, `m` over all ranks (each holds `m / R` rows: a multiple of 128 up to 8 ranks; the work per rank
/// stays the same as ranks are added, so ranks sharing one GPU multiply the total); the first two are checked
/// against the f64 host reference.
const SHAPES: &[(usize, usize, usize)] = &[(1024, 256, 256), (2048, 128, 512), (4096, 1024, 4096), (8192, 2048, 4096)];
const CHECKED: usize = 2;
const BLOCK: u32 = 256;
/// The decoupled variant: rows per chunk of the all-gather (one flag each), and its copy kernel's block size.
const CHUNK_ROWS: usize = 128;
const SIGNAL_BLOCK: u32 = 512;
/// How long the decoupled variant's first, checked run may take before it is an error (a flag never raised).
const DECOUPLED_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);
const WARMUP: usize = 2;
const ITERATIONS: usize = 10;

fn main() -> Result<()> {
    println!("weft example 08 — all-gather + GEMM (column-parallel linear), fused over LSA vs ncclAllGather + GEMM\n");
    match common::gpus() {
        Ok(_) => run(),
        Err(why) => common::without_gpu(
            &why,
            &[fused::compile_check, signal::compile_check, gemm_tiles::compile_check, fused_tiles::compile_check],
            &[],
            &format!(
                "runs one rank per GPU (WEFT_RANKS=n runs n) and, for (m, n, k) in {SHAPES:?}, computes \
                 all_gather(x) x w in bf16 with the fused kernel, with ncclAllGather + the same GEMM kernel, with \
                 ncclAllGather + cuBLAS, with the decoupled all-gather gating cuBLAS per chunk and (where the GPU \
                 runs it) with the fused kernel on the persistent gemm_tiles loop, checks them against an f64 host \
                 reference and each other, and prints their median times and TFLOP/s."
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
    // A malformed `WEFT_AG_GEMM_PATHS` is refused before any rank starts; each rank then takes the rules for the GEMM
    // mainloop its GPU runs (kit's select.rs), rank 0 printing them.
    AgGemmTable::from_env()?;
    let references = gemm_report::start(SHAPES, CHECKED, nranks, reference);
    let reports = ranks.run(&Config::new(), |comm| {
        // The fused kernel reaches every rank through LSA: across nodes it cannot.
        common::require_one_lsa_team(comm, "this example")?;
        let s = comm.context().new_stream()?;
        // The decoupled variant's all-gather runs on a stream of its own, next to the GEMMs on `s`.
        let side = comm.context().new_stream()?;
        let cfg = fused::one_wave::<bf16>(comm, &s, BLOCK)?;
        let signal_cfg = signal::one_wave::<bf16>(comm, &side, SIGNAL_BLOCK)?;
        // Every kernel this rank launches is loaded before the first collective setup call (docs/multi-rank.md,
        // "Load before launch"): `one_wave` loaded the other two.
        gemm_tiles::function::<bf16>(comm.context())?;
        let mut needs = fused::requirements(&cfg).merge(&signal::requirements(&signal_cfg));
        // The persistent loop where the GPU runs it; its grid is the rank's share of the GPU at most (every rank's
        // blocks wait at LSA barriers for each other), sized here for the largest shape.
        let (most_m, most_n, _) = SHAPES.iter().copied().max_by_key(|&(m, n, _)| m * n).unwrap_or((128, 256, 64));
        let tiles = match common::gemm_tiles_here(comm, &s, most_m, most_n)? {
            Some(most) => {
                fused_tiles::function::<bf16>(comm.context())?;
                needs = needs.merge(&fused_tiles::requirements(&most));
                true
            }
            None => false,
        };
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&needs)?;
        let blas = weft_kit::blas::handle(&s)?;
        // The measured rules for the mainloop this GPU runs (or the user's, from the environment).
        let paths = AgGemmTable::from_env_on(common::gemm_mainloop(comm.context())?)?;
        if comm.rank() == 0 {
            println!("selector: {paths} (m x n x k multiply-adds; {} replaces it)", AgGemmTable::ENV);
            println!(
                "launch geometry: fused {} blocks of {BLOCK} (one wave), unfused one block per 128 x 128 tile, \
                 decoupled all-gather {} blocks of {SIGNAL_BLOCK}; fused tiles: {}",
                cfg.grid_dim.0,
                signal_cfg.grid_dim.0,
                if tiles { common::gemm_tiles_loop(comm.context())? } else { "not on this GPU" }
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
            let mut out_decoupled = s.clone_htod(&poison)?;
            let mut out_tiles = s.clone_htod(&poison)?;
            // The persistent loop's operands and grid, where it runs (m / R a multiple of 128 holds for every shape
            // here). Its shards need every peer's address of `x`, which NCCL gives the host from 2.29 on: with several
            // ranks on NCCL 2.28 the variant is left out.
            let tiles_ag = if tiles && n % 256 == 0 && k % 64 == 0 {
                match weft::host::launch::TmaShards::gemm_a(&x, shard, k, k) {
                    Ok(tx) => Some((
                        tx,
                        weft::host::launch::TmaOperand::gemm_b(&w, k, n, n)?,
                        weft::host::launch::gemm_tiles_config_shared(comm, &s, m, n)?,
                    )),
                    Err(Error::Unsupported { .. }) => None,
                    Err(other) => return Err(other),
                }
            } else {
                None
            };
            let mut gathered = s.alloc_zeros::<bf16>(m * k)?;
            let tiles_cfg = LaunchConfig::linear(u32::try_from((m / 128) * (n / 128)).unwrap_or(u32::MAX), BLOCK);
            // The decoupled variant: weft buffers on the side stream; the GEMMs on `s` read `staged` as the flags say
            // each part is written (`Part`: unordered reads), not when the whole all-gather is done.
            let mut staged = DeviceBuffer::<bf16>::new(&side, m * k)?;
            let mut ready = DeviceBuffer::from_host(&side, &vec![0u32; m / CHUNK_ROWS])?;
            if let Some(blas) = &blas {
                // cuBLAS loads a shape's kernels at its first call: while no peer communicates (docs/multi-rank.md).
                comm.with_gpu_peers_idle(|| {
                    weft_kit::blas::gemm(blas, &gathered, &w, &mut out_unfused, (m, n, k))?;
                    // SAFETY: nothing has written `staged` yet, on any stream: there is no write to wait for.
                    let rows = unsafe { Part::of(&staged, 0, shard * k) }?;
                    weft_kit::blas::gemm(blas, &rows, &w, &mut out_decoupled.slice_mut(0..shard * n), (shard, n, k))?;
                    weft::host::cuda::settle(&s)
                })?;
            }
            let mut epoch = 0u32;
            let mut decoupled = |epoch: u32, out: &mut CudaSlice<bf16>| -> std::result::Result<(), Error> {
                let Some(blas) = &blas else { return Ok(()) };
                // The all-gather may overwrite `staged` once the GEMMs enqueued before it are done.
                side.wait(&s.record_event(None)?)?;
                signal::launch(&side, signal_cfg, &dev, &x, &mut staged, &mut ready, shard * k, CHUNK_ROWS * k, epoch)?;
                // The flags rise only once every peer's all-gather runs (its first barrier): on a shared GPU, enqueue
                // the waits only after every peer has enqueued its all-gather, or the GPU may queue a peer's launch
                // behind this rank's wait (docs/multi-rank.md, "Stream waits on flags that peers raise").
                comm.line_up_gpu_peers("launching the decoupled all-gather")?;
                // Each rank's rows as soon as they are in place, this rank's own first.
                for step in 0..nranks {
                    let owner = (rank + step) % nranks;
                    let chunks = shard / CHUNK_ROWS;
                    for c in owner * chunks..(owner + 1) * chunks {
                        ready.stream_wait_at_least(&s, c, epoch)?;
                    }
                    // SAFETY: `s` waited above for the flags of exactly these rows, which the all-gather raises
                    // after writing them, and nothing else writes `staged` until the round ends (the next round's
                    // all-gather first waits for `s`).
                    let rows = unsafe { Part::of(&staged, owner * shard * k, shard * k) }?;
                    let mut part = out.slice_mut(owner * shard * n..(owner + 1) * shard * n);
                    weft_kit::blas::gemm(blas, &rows, &w, &mut part, (shard, n, k))?;
                }
                // The round ends when the all-gather has too (its last barrier: peers may then change `x`). On a
                // shared GPU this also keeps each rank to one waiting kernel at a time: the next variant's fused
                // kernel cannot start next to a signal kernel still waiting for a peer (docs/multi-rank.md).
                s.wait(&side.record_event(None)?)?;
                Ok(())
            };

            fused::launch(&s, cfg, &dev, &x, &w, &mut out, m, n, k)?;
            let got = weft::host::cuda::download(&s, &out)?;
            comm.all_gather(x.buffer(), &mut gathered, &s)?;
            gemm_tiles::launch(&s, tiles_cfg, &gathered, &w, &mut out_unfused, m, n, k)?;
            let unfused: Vec<f64> = weft::host::cuda::download(&s, &out_unfused)?.iter().map(|v| v.value()).collect();
            let mut errors = Vec::new();
            if index < CHECKED {
                errors.push(("fused vs f64", common::relative_error(&got, &references[index][rank])));
            }
            errors.push(("fused vs unfused", common::relative_error(&got, &unfused)));
            if blas.is_some() {
                epoch += 1;
                decoupled(epoch, &mut out_decoupled)?;
                // A flag that never rises must end in an error here, not in a hang.
                weft::host::cuda::settle_within(&s, DECOUPLED_DEADLINE)?;
                let got = weft::host::cuda::download(&s, &out_decoupled)?;
                errors.push(("decoupled vs unfused", common::relative_error(&got, &unfused)));
            }
            if let Some((tx, tw, tcfg)) = &tiles_ag {
                fused_tiles::launch(&s, *tcfg, &dev, tx, tw, &mut out_tiles)?;
                let got_tiles = weft::host::cuda::download(&s, &out_tiles)?;
                if index < CHECKED {
                    errors.push(("fused tiles vs f64", common::relative_error(&got_tiles, &references[index][rank])));
                }
                errors.push(("fused tiles vs unfused", common::relative_error(&got_tiles, &unfused)));
            }

            let times =
                common::time_variants_apart(comm, &stopwatch, &s, WARMUP, ITERATIONS, 5, |variant| match variant {
                    0 => fused::launch(&s, cfg, &dev, &x, &w, &mut out, m, n, k),
                    1 => {
                        comm.all_gather(x.buffer(), &mut gathered, &s)?;
                        gemm_tiles::launch(&s, tiles_cfg, &gathered, &w, &mut out_unfused, m, n, k)
                    }
                    2 => match &blas {
                        Some(blas) => {
                            comm.all_gather(x.buffer(), &mut gathered, &s)?;
                            weft_kit::blas::gemm(blas, &gathered, &w, &mut out_unfused, (m, n, k))
                        }
                        None => Ok(()),
                    },
                    3 => {
                        epoch += 1;
                        decoupled(epoch, &mut out_decoupled)
                    }
                    _ => match &tiles_ag {
                        Some((tx, tw, tcfg)) => fused_tiles::launch(&s, *tcfg, &dev, tx, tw, &mut out_tiles),
                        None => Ok(()),
                    },
                })?;
            let skipped = |t: f64| if blas.is_some() { t } else { f64::NAN };
            let tiles_time = if tiles_ag.is_some() { times[4] } else { f64::NAN };
            let times = vec![times[0], times[1], skipped(times[2]), skipped(times[3]), tiles_time];
            // A rule whose path cannot run here (no cuBLAS for the decoupled path, no gemm_tiles loop or shape for
            // the tiles kernel) falls through to the next.
            let runs = |path| match path {
                AllGatherGemm::Decoupled => blas.is_some(),
                AllGatherGemm::FusedTiles => tiles_ag.is_some(),
                AllGatherGemm::Fused | AllGatherGemm::Nccl => true,
            };
            let picked = match paths.pick_where(m * n * k, nranks, runs) {
                AllGatherGemm::Fused => 0,
                AllGatherGemm::Decoupled => 3,
                AllGatherGemm::FusedTiles => 4,
                AllGatherGemm::Nccl if blas.is_some() => 2,
                AllGatherGemm::Nccl => 1,
            };
            cases.push(GemmCase { shape: (shard, n, k), times, errors, picked });
            // Nothing may still wait on flags or read `staged` when they go.
            weft::host::cuda::settle(&side)?;
        }
        weft::host::cuda::settle(&s)?;
        Ok(cases)
    })?;

    gemm_report::print(
        &reports,
        ranks.first_rank(),
        &["fused", "AG+GEMM", "AG+cuBLAS", "AG|cuBLAS", "fused tiles"],
        2,
        |(shard, n, k)| 2.0 * (shard * nranks * n * k) as f64,
    )
}
