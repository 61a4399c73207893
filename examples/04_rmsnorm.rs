//! Tensor-parallel residual add + RMSNorm, fused with its reduce-scatter and all-gather into one weft kernel over
//! LSA, against `ncclReduceScatter` + an epilogue kernel + `ncclAllGather`, on every visible GPU.
//!
//! ```sh
//! cargo run --release --example rmsnorm
//! ```
//!
//! After a row-parallel linear layer every rank holds partial activations `x` for all `rows x hidden`; the
//! sequence-parallel layer that follows wants, per rank, its rows of `h = sum(x) + residual` (kept as the next
//! residual) and every row of `RMSNorm(h) * weight` (PyTorch's definition, `eps` inside the square root). Two ways,
//! both checked against an f64 host reference (outputs poisoned with NaN first) and timed with CUDA events
//! (median of 20 after 3 warm-up rounds, interleaved):
//!
//! - fused (`kernels/rmsnorm.rs`): one kernel, one block per row: sums the row from every peer's window, adds the
//!   residual, normalizes, and stores the row straight into every peer's output window;
//! - unfused: `ncclReduceScatter(x -> reduced)`, `benches/cuda/rmsnorm_epilogue.cu` (residual add + RMSNorm, 16-byte
//!   vector loads), `ncclAllGather(normed -> out)`.
//!
//! Bytes per rank, `N = rows x hidden`, `R` ranks, `S = N / R` (this rank's rows):
//!
//! | variant | reads | writes | one rank |
//! |---|---|---|---|
//! | fused | `R·S` (x, `S` local) + `S` (residual) | `S` (residual_out) + `R·S` (out, `S` local) | `4N` |
//! | unfused | reduce-scatter's + `2S` | reduce-scatter's `S` + `2S` + all-gather's `N` | `2N` + `4N` + `2N` = `8N` |
//!
//! On one GPU the collectives are copies, so the fused kernel should approach twice the unfused speed where both
//! are bandwidth-bound; with more ranks the reduce-scatter and all-gather traffic is NVLink traffic in both, and
//! the fused kernel saves the epilogue's separate pass and two kernel launches.
//!
//! Needs every rank in one LSA team (NVLink-connected GPUs of one host). On a machine without a GPU it compiles the
//! kernel and the baseline with nvcc against every NCCL release's headers it finds, says so, and exits 0.

use weft_kit::common;
use weft_kit::kernels;
use weft_kit::select::{Protocol, Table};

use std::sync::Arc;

use common::{Real, Result};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream};
use kernels::rmsnorm::rmsnorm_residual_tp as fused;
use weft::host::caps::Lsa;
use weft::host::launch::{launch_raw, ArgBuffer};
use weft::host::{Communicator, Config, DevComm, Error, LaunchConfig, ReduceOp, Window, WindowFlags};

const BASELINE: &str = weft_kit::baselines::RMSNORM_EPILOGUE;
/// `(rows, hidden)` before rounding `rows` up to a multiple of the rank count.
const SHAPES: &[(usize, usize)] = &[(64, 4096), (512, 4096), (2048, 8192)];
const EPS: f32 = 1e-5;
const BLOCK: u32 = 256;
const WARMUP: usize = 3;
const ITERATIONS: usize = 20;

fn main() -> Result<()> {
    println!("weft example 04 — tensor-parallel residual add + RMSNorm, fused with reduce-scatter and all-gather\n");
    match common::gpus() {
        Ok(_) => run(),
        Err(why) => common::without_gpu(
            &why,
            &[fused::compile_check],
            &[("rmsnorm_epilogue", BASELINE)],
            &format!(
                "runs one rank per GPU (WEFT_RANKS=n runs n) and, for rows x hidden in {SHAPES:?} and f32 and bf16, computes the residual \
                 add + RMSNorm of the reduce-scattered partial activations and all-gathers it, with the fused \
                 kernel and with ncclReduceScatter + the epilogue kernel + ncclAllGather, checks both against an \
                 f64 host reference and prints their median times and the speedup."
            ),
        ),
    }
}

fn x_seed(rank: usize) -> u64 {
    2000 + rank as u64
}
const RESIDUAL_SEED: u64 = 3;
const WEIGHT_SEED: u64 = 4;

/// `rows` rounded up to a multiple of `nranks`.
fn rows_for(rows: usize, nranks: usize) -> usize {
    rows.div_ceil(nranks) * nranks
}

/// The f64 reference of one case: `h` (all rows) and the normalized rows.
struct Reference {
    h: Vec<f64>,
    normed: Vec<f64>,
}

fn reference<T: Real>(nranks: usize, rows: usize, hidden: usize) -> Reference {
    let n = rows * hidden;
    let mut h: Vec<f64> = common::random_as::<T>(n, RESIDUAL_SEED).iter().map(|v| v.value()).collect();
    for rank in 0..nranks {
        for (acc, x) in h.iter_mut().zip(common::random_as::<T>(n, x_seed(rank))) {
            *acc += x.value();
        }
    }
    let weight: Vec<f64> = common::random_as::<T>(hidden, WEIGHT_SEED).iter().map(|v| v.value()).collect();
    let mut normed = vec![0.0; n];
    for (row, out) in h.chunks(hidden).zip(normed.chunks_mut(hidden)) {
        let mean_square = row.iter().map(|v| v * v).sum::<f64>() / hidden as f64;
        let scale = 1.0 / (mean_square + f64::from(EPS)).sqrt();
        for ((o, v), w) in out.iter_mut().zip(row).zip(&weight) {
            *o = v * scale * w;
        }
    }
    Reference { h, normed }
}

struct Case {
    dtype: &'static str,
    rows: usize,
    hidden: usize,
    element_bytes: usize,
    /// Median µs: fused, unfused.
    times: [f64; 2],
    /// Relative errors of (out, residual_out): fused, unfused.
    errors: [(f64, f64); 2],
    tolerance: f64,
}

impl Case {
    fn passed(&self) -> bool {
        self.errors.iter().all(|(a, b)| *a < self.tolerance && *b < self.tolerance)
    }
}

fn run() -> Result<()> {
    // The protocol table (weft_kit::select) decides whether this size runs fused or as NCCL + a separate kernel;
    // every fused protocol maps to this example's one fused kernel (reduce-scatter + norm + all-gather).
    let table = Table::from_env()?;
    let ranks = common::Ranks::from_env()?;
    let nranks = ranks.nranks();
    println!("{nranks} rank(s); computing the host references...");
    let shapes: Vec<(usize, usize)> = SHAPES.iter().map(|&(rows, hidden)| (rows_for(rows, nranks), hidden)).collect();
    let references_f32: Vec<Reference> = shapes.iter().map(|&(r, h)| reference::<f32>(nranks, r, h)).collect();
    let references_bf16: Vec<Reference> = shapes.iter().map(|&(r, h)| reference::<half::bf16>(nranks, r, h)).collect();
    let reports = ranks.run(&Config::new(), |comm| {
        let rank = Rank::new(comm)?;
        let mut cases = Vec::new();
        for (s, &(rows, hidden)) in shapes.iter().enumerate() {
            cases.push(rank.case::<f32>(rows, hidden, &references_f32[s])?);
            cases.push(rank.case::<half::bf16>(rows, hidden, &references_bf16[s])?);
        }
        Ok(cases)
    })?;

    let first = ranks.first_rank();
    println!(
        "\n{nranks} rank(s); rank {first}'s median times in µs (every rank's result is checked); picked = the protocol \
         table's choice ({table}: `nccl` runs the unfused path, any other protocol the fused kernel); speedup = \
         unfused / picked\n"
    );
    println!(
        "{:>5} {:>11} {:>8} | {:>9} {:>9} {:>7} {:>7} | {:>10} | {:>9} {:>9} {:>9} {:>9}",
        "type",
        "rows x hid",
        "message",
        "fused",
        "unfused",
        "picked",
        "speedup",
        "fused GB/s",
        "err out",
        "err resid",
        "unf out",
        "unf resid"
    );
    for (c, case) in reports[0].iter().enumerate() {
        let worst = |k: usize, second: bool| {
            common::worst(reports.iter().map(|r| if second { r[c].errors[k].1 } else { r[c].errors[k].0 }))
        };
        let message = case.rows * case.hidden * case.element_bytes;
        let fused_bytes = message / nranks * (2 * nranks + 2);
        let (picked, picked_time) = match table.pick(message, nranks) {
            Protocol::Nccl => ("unfused", case.times[1]),
            _ => ("fused", case.times[0]),
        };
        println!(
            "{:>5} {:>11} {:>8} | {:>9.1} {:>9.1} {:>7} {:>6.2}x | {:>10.0} | {:>9.1e} {:>9.1e} {:>9.1e} {:>9.1e}",
            case.dtype,
            format!("{}x{}", case.rows, case.hidden),
            common::bytes(message),
            case.times[0],
            case.times[1],
            picked,
            case.times[1] / picked_time,
            fused_bytes as f64 / (case.times[0] * 1e-6) / 1e9,
            worst(0, false),
            worst(0, true),
            worst(1, false),
            worst(1, true),
        );
    }
    let failed: Vec<String> = reports
        .iter()
        .enumerate()
        .flat_map(|(index, cases)| {
            let rank = first + index;
            cases.iter().filter(|c| !c.passed()).map(move |c| {
                format!(
                    "rank {rank} {} {}x{}: (out, residual_out) errors fused {:?}, unfused {:?} (limit {})",
                    c.dtype, c.rows, c.hidden, c.errors[0], c.errors[1], c.tolerance
                )
            })
        })
        .collect();
    common::verdict(&failed, "f32 < 1e-5, bf16 < 1e-2")
}

/// One rank's state: stream, baseline kernels, launch geometries, device communicator.
struct Rank<'comm> {
    comm: &'comm Communicator,
    stream: Arc<CudaStream>,
    stopwatch: common::Stopwatch,
    /// One full wave of (fused, epilogue), per type (f32, bf16); the grid is capped at the row count per case.
    waves: [(LaunchConfig, LaunchConfig); 2],
    epilogues: [CudaFunction; 2],
    dev: DevComm<'comm, Lsa>,
}

impl<'comm> Rank<'comm> {
    fn new(comm: &'comm Communicator) -> std::result::Result<Self, Error> {
        common::require_one_lsa_team(comm, "this example")?;
        let stream = comm.context().new_stream()?;
        let baseline = common::Baseline::load(comm.context(), "rmsnorm_epilogue", BASELINE)?;
        let (epilogues, epilogue_waves) = baseline.per_type(comm, "rmsnorm_epilogue", &stream, BLOCK)?;
        let fused_waves =
            [fused::one_wave::<f32>(comm, &stream, BLOCK)?, fused::one_wave::<half::bf16>(comm, &stream, BLOCK)?];
        let waves = [(fused_waves[0], epilogue_waves[0]), (fused_waves[1], epilogue_waves[1])];
        let requirements = fused::requirements(&waves[0].0).merge(&fused::requirements(&waves[1].0));
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&requirements)?;
        if comm.rank() == 0 {
            println!(
                "launch geometry (one full wave at most, one block per row, {BLOCK} threads): fused {} / {} blocks, \
                 epilogue {} / {} (f32 / bf16)",
                waves[0].0.grid_dim.0, waves[1].0.grid_dim.0, waves[0].1.grid_dim.0, waves[1].1.grid_dim.0
            );
        }
        Ok(Rank { comm, stopwatch: common::Stopwatch::new(comm.context())?, stream, waves, epilogues, dev })
    }

    fn case<T: Real>(&self, rows: usize, hidden: usize, want: &Reference) -> std::result::Result<Case, Error> {
        let (comm, stream, dev) = (self.comm, &self.stream, &self.dev);
        let (n, nranks, rank) = (rows * hidden, comm.nranks(), comm.rank());
        let (my_rows, shard) = (rows / nranks, rows / nranks * hidden);
        let which = usize::from(common::type_name::<T>() == "bf16");
        let (mut fused_cfg, mut epilogue_cfg) = self.waves[which];
        // No more blocks than rows: the same count on every rank, as the barriers need.
        fused_cfg.grid_dim.0 = fused_cfg.grid_dim.0.min(my_rows as u32);
        epilogue_cfg.grid_dim.0 = epilogue_cfg.grid_dim.0.min(my_rows as u32);
        let epilogue = &self.epilogues[which];

        let mut x = comm.alloc_window::<T>(stream, n, WindowFlags::COLL_SYMMETRIC)?;
        x.buffer_mut().copy_from_host(&common::random_as::<T>(n, x_seed(rank)))?;
        let mut out = comm.alloc_window::<T>(stream, n, WindowFlags::COLL_SYMMETRIC)?;
        let residual_all = common::random_as::<T>(n, RESIDUAL_SEED);
        let residual = stream.clone_htod(&residual_all[rank * shard..(rank + 1) * shard])?;
        let weight = stream.clone_htod(&common::random_as::<T>(hidden, WEIGHT_SEED))?;
        let (poison_all, poison_shard) = (vec![T::nan(); n], vec![T::nan(); shard]);
        let mut residual_out = stream.clone_htod(&poison_shard)?;
        let mut reduced: CudaSlice<T> = stream.clone_htod(&poison_shard)?;
        let mut normed: CudaSlice<T> = stream.clone_htod(&poison_shard)?;
        let mut gathered: CudaSlice<T> = stream.clone_htod(&poison_all)?;
        let want_h = &want.h[rank * shard..(rank + 1) * shard];

        // Checked runs on poisoned outputs. Peers write into `out` only after this rank's kernel passed its first
        // barrier, so poisoning it here, before the launch, cannot erase their writes.
        out.buffer_mut().copy_from_host(&poison_all)?;
        fused::launch(stream, fused_cfg, dev, &x, &residual, &weight, &mut residual_out, &out, rows, hidden, EPS)?;
        weft::host::cuda::settle(stream)?;
        let fused_errors = (
            common::relative_error(&out.buffer().copy_to_host()?, &want.normed),
            common::relative_error(&weft::host::cuda::download(stream, &residual_out)?, want_h),
        );
        stream.memcpy_htod(&poison_shard, &mut residual_out)?;
        let mut baseline = Unfused {
            comm,
            stream,
            epilogue,
            cfg: epilogue_cfg,
            reduced: &mut reduced,
            normed: &mut normed,
            gathered: &mut gathered,
            rows: my_rows,
            hidden,
        };
        baseline.run(&x, &residual, &weight, &mut residual_out)?;
        let unfused_errors = (
            common::relative_error(&weft::host::cuda::download(stream, &*baseline.gathered)?, &want.normed),
            common::relative_error(&weft::host::cuda::download(stream, &residual_out)?, want_h),
        );

        let times = common::time_variants(&self.stopwatch, stream, WARMUP, ITERATIONS, 2, |variant| match variant {
            0 => fused::launch(
                stream,
                fused_cfg,
                dev,
                &x,
                &residual,
                &weight,
                &mut residual_out,
                &out,
                rows,
                hidden,
                EPS,
            ),
            _ => baseline.run(&x, &residual, &weight, &mut residual_out),
        })?;
        weft::host::cuda::settle(stream)?;
        Ok(Case {
            dtype: common::type_name::<T>(),
            rows,
            hidden,
            element_bytes: std::mem::size_of::<T>(),
            times: [times[0], times[1]],
            errors: [fused_errors, unfused_errors],
            tolerance: T::TOLERANCE,
        })
    }
}

/// The unfused baseline's buffers and kernel: `ncclReduceScatter(x -> reduced)`, the hand-written residual add +
/// RMSNorm (`reduced`, `residual` -> `residual_out`, `normed`), `ncclAllGather(normed -> gathered)`.
struct Unfused<'a, T: Real> {
    comm: &'a Communicator,
    stream: &'a Arc<CudaStream>,
    epilogue: &'a CudaFunction,
    cfg: LaunchConfig,
    reduced: &'a mut CudaSlice<T>,
    normed: &'a mut CudaSlice<T>,
    gathered: &'a mut CudaSlice<T>,
    rows: usize,
    hidden: usize,
}

impl<T: Real> Unfused<'_, T> {
    fn run(
        &mut self,
        x: &Window<'_, T>,
        residual: &CudaSlice<T>,
        weight: &CudaSlice<T>,
        residual_out: &mut CudaSlice<T>,
    ) -> std::result::Result<(), Error> {
        let stream = self.stream;
        self.comm.reduce_scatter(x.buffer(), self.reduced, ReduceOp::Sum, stream)?;
        {
            let mut args = ArgBuffer::new();
            let reduced = args.slice_arg(&*self.reduced, stream)?.ptr;
            args.push(reduced);
            let residual = args.slice_arg(residual, stream)?.ptr;
            args.push(residual);
            let weight = args.slice_arg(weight, stream)?.ptr;
            args.push(weight);
            let residual_out = args.slice_arg_mut(residual_out, stream)?.ptr;
            args.push(residual_out);
            let normed = args.slice_arg_mut(&mut *self.normed, stream)?.ptr;
            args.push(normed);
            args.push(self.rows);
            args.push(self.hidden);
            args.push(EPS);
            // SAFETY: the arguments are rmsnorm_epilogue_{f32,bf16}'s (const T* reduced, const T* residual,
            // const T* weight, T* residual_out, T* normed, size_t rows, size_t hidden, float eps) in order, for the
            // T the function was chosen for; the matrices hold rows x hidden elements and weight hidden; every
            // buffer is borrowed by `args`, dropped after the launch so cudarc orders later uses after the kernel.
            unsafe { launch_raw(self.epilogue, stream, &self.cfg, &mut args)? };
        }
        self.comm.all_gather(&*self.normed, self.gathered, stream)
    }
}
