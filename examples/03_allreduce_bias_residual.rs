//! All-reduce + bias + residual — the epilogue of every tensor-parallel row-parallel linear layer — as one weft
//! kernel over LSA, against the unfused `ncclAllReduce` + epilogue kernel, on every visible GPU.
//!
//! ```sh
//! cargo run --release --example allreduce_bias_residual
//! ```
//!
//! `y = allreduce(x) + bias (broadcast over rows) + residual`, for `rows x hidden` activations in f32 and bf16.
//! Three ways, each checked against an f64 host reference (outputs poisoned with NaN first) and timed with CUDA
//! events (median of 20 after 3 warm-up rounds, the variants interleaved):
//!
//! - fused one-shot (`kernels/allreduce_epilogue.rs`): every rank reads every peer's `x` and writes all of `y`;
//! - fused two-shot: reduce-scatter with the epilogue into a scratch window, LSA barrier, all-gather;
//! - unfused: `ncclAllReduce(x -> tmp)`, then `benches/cuda/allreduce_epilogue.cu` (`y = tmp + bias + residual`,
//!   16-byte vector loads);
//! - fused Lamport one-shot (`kernels/allreduce_lamport.rs`): the one-shot without a barrier, the data carrying its
//!   own "written" mark in three rotating buffers;
//! - the fused one-shot captured once into a CUDA graph (`one_shot::record`, docs/graphs.md) and replayed: checked
//!   like the others, and timed against its eager launch.
//!
//! Bytes each moves per rank, for `N = rows x hidden` elements on `R` ranks (bias is `hidden` elements, cached):
//!
//! | variant | reads | writes | one rank |
//! |---|---|---|---|
//! | fused one-shot | `R·N` (x, `N` of it local) + `N` (residual) | `N` | `3N` |
//! | fused two-shot | `N` (x) + `N/R` (residual) + `(R−1)·N/R` (peers' y) | `N/R` (y) + `N` | `4N` |
//! | unfused | NCCL's all-reduce + `2N` (tmp, residual) | NCCL's + `N` | `2N` (NCCL's copy) + `3N` = `5N` |
//!
//! So on one GPU the fused one-shot should approach `5/3` of the unfused speed at sizes where both are
//! bandwidth-bound; the two-shot exists for many ranks and large messages, where reading every peer's whole
//! buffer (`R·N` over NVLink) costs more than the extra pass. Which one a size and rank count should use is the
//! protocol table's answer (`weft_kit::select`: measured defaults, `WEFT_ALLREDUCE_PROTOCOLS` overrides them); the
//! example runs every variant, prints the table's pick and the speedup of the picked one over the unfused baseline.
//!
//! On a machine without a GPU it compiles the kernels and the baseline with nvcc against every NCCL release's
//! headers it finds, says so, and exits 0.

use weft_kit::common;
use weft_kit::kernels;

use std::sync::Arc;

use common::{Real, Result};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream};
use kernels::allreduce_epilogue::{
    allreduce_bias_residual_one_shot as one_shot, allreduce_bias_residual_two_shot as two_shot,
};
use kernels::allreduce_lamport::allreduce_bias_residual_lamport as lamport;
use weft::host::caps::Lsa;
use weft::host::launch::{launch_raw, ArgBuffer};
use weft::host::{
    Communicator, Config, DevComm, DeviceBuffer, Error, Graph, LaunchConfig, ReduceOp, Requirements, WindowFlags,
};
use weft_kit::lamport::LamportAllReduce;
use weft_kit::select::{Protocol, Table};

/// The hand-written epilogue of the unfused baseline.
const BASELINE: &str = weft_kit::baselines::ALLREDUCE_EPILOGUE;
/// `(rows, hidden)`: a decode step, a small prefill, a large prefill.
const SHAPES: &[(usize, usize)] = &[(16, 4096), (256, 4096), (2048, 8192)];
const BLOCK: u32 = 512;
const WARMUP: usize = 3;
const ITERATIONS: usize = 20;

fn main() -> Result<()> {
    println!("weft example 03 — all-reduce + bias + residual, fused over LSA vs ncclAllReduce + epilogue kernel\n");
    match common::gpus() {
        Ok(_) => run(),
        Err(why) => common::without_gpu(
            &why,
            &[one_shot::compile_check, two_shot::compile_check, lamport::compile_check],
            &[("allreduce_epilogue", BASELINE)],
            &format!(
                "runs one rank per GPU (WEFT_RANKS=n runs n) and, for rows x hidden in {SHAPES:?} and f32 and bf16, computes \
                 allreduce(x) + bias + residual with the fused one-shot, two-shot and Lamport kernels, with \
                 ncclAllReduce + the epilogue kernel and with the one-shot replayed from a CUDA graph, checks all \
                 against an f64 host reference and prints their median times, the protocol table's pick and its \
                 speedup."
            ),
        ),
    }
}

/// The inputs of one case, the same on every rank except `x`.
fn x_seed(rank: usize) -> u64 {
    1000 + rank as u64
}
const BIAS_SEED: u64 = 1;
const RESIDUAL_SEED: u64 = 2;

/// The f64 reference of one case: `sum_r x_r + bias + residual`, from the values rounded to `T` as uploaded.
fn reference<T: Real>(nranks: usize, rows: usize, hidden: usize) -> Vec<f64> {
    let n = rows * hidden;
    let bias = common::random_as::<T>(hidden, BIAS_SEED);
    let mut want: Vec<f64> = common::random_as::<T>(n, RESIDUAL_SEED).iter().map(|v| v.value()).collect();
    for (i, w) in want.iter_mut().enumerate() {
        *w += bias[i % hidden].value();
    }
    for rank in 0..nranks {
        for (w, x) in want.iter_mut().zip(common::random_as::<T>(n, x_seed(rank))) {
            *w += x.value();
        }
    }
    want
}

struct Case {
    dtype: &'static str,
    rows: usize,
    hidden: usize,
    element_bytes: usize,
    /// Median µs: fused one-shot, fused two-shot, fused Lamport, unfused, fused one-shot replayed from a CUDA graph.
    times: [f64; 5],
    /// Relative errors, same order.
    errors: [f64; 5],
    tolerance: f64,
}

impl Case {
    fn passed(&self) -> bool {
        self.errors.iter().all(|e| *e < self.tolerance)
    }
}

fn run() -> Result<()> {
    let table = Table::from_env()?;
    let ranks = common::Ranks::from_env()?;
    let nranks = ranks.nranks();
    println!("{nranks} rank(s); computing the host references...");
    let mut references_f32 = Vec::new();
    let mut references_bf16 = Vec::new();
    for &(rows, hidden) in SHAPES {
        references_f32.push(reference::<f32>(nranks, rows, hidden));
        references_bf16.push(reference::<half::bf16>(nranks, rows, hidden));
    }
    let reports = ranks.run(&Config::new(), |comm| {
        let mut cases = Vec::new();
        let ranks = Ranks::new(comm)?;
        for (s, &(rows, hidden)) in SHAPES.iter().enumerate() {
            cases.push(ranks.case::<f32>(rows, hidden, &references_f32[s])?);
            cases.push(ranks.case::<half::bf16>(rows, hidden, &references_bf16[s])?);
        }
        Ok(cases)
    })?;

    let first = ranks.first_rank();
    println!(
        "\n{nranks} rank(s); rank {first}'s median times in µs (every rank's result is checked); picked = the protocol \
         table's choice ({table}); speedup = unfused / picked\n"
    );
    println!(
        "{:>5} {:>12} {:>8} | {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>7} | {:>8} {:>8} {:>8} {:>8} {:>8}",
        "type",
        "rows x hid",
        "message",
        "one-shot",
        "two-shot",
        "lamport",
        "unfused",
        "1-sh graph",
        "picked",
        "speedup",
        "err 1-sh",
        "err 2-sh",
        "err lamp",
        "err unf",
        "err graph"
    );
    for (c, case) in reports[0].iter().enumerate() {
        let worst = |k: usize| common::worst(reports.iter().map(|r| r[c].errors[k]));
        let message = case.rows * case.hidden * case.element_bytes;
        let picked = table.pick(message, nranks);
        let picked_time = match picked {
            Protocol::OneShot => case.times[0],
            Protocol::TwoShot => case.times[1],
            Protocol::Lamport => case.times[2],
            Protocol::Nccl => case.times[3],
        };
        println!(
            "{:>5} {:>12} {:>8} | {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} | {:>9} {:>6.2}x | {:>8.1e} {:>8.1e} {:>8.1e} \
             {:>8.1e} {:>8.1e}",
            case.dtype,
            format!("{}x{}", case.rows, case.hidden),
            common::bytes(message),
            case.times[0],
            case.times[1],
            case.times[2],
            case.times[3],
            case.times[4],
            picked.name(),
            case.times[3] / picked_time,
            worst(0),
            worst(1),
            worst(2),
            worst(3),
            worst(4),
        );
    }
    let failed: Vec<String> = reports
        .iter()
        .enumerate()
        .flat_map(|(index, cases)| {
            let rank = first + index;
            cases.iter().filter(|c| !c.passed()).map(move |c| {
                format!(
                    "rank {rank} {} {}x{}: errors {:?} (limit {})",
                    c.dtype, c.rows, c.hidden, c.errors, c.tolerance
                )
            })
        })
        .collect();
    common::verdict(&failed, "f32 < 1e-5, bf16 < 1e-2")
}

/// One rank's state: its stream, the baseline kernels, launch geometries and the device communicator.
struct Ranks<'comm> {
    comm: &'comm Communicator,
    stream: Arc<CudaStream>,
    stopwatch: common::Stopwatch,
    /// The baseline's epilogue kernel, per type (f32, bf16).
    epilogues: [CudaFunction; 2],
    /// One full wave of each kernel, per type (f32, bf16).
    one_shot_cfg: [LaunchConfig; 2],
    lamport_cfg: [LaunchConfig; 2],
    two_shot_cfg: [LaunchConfig; 2],
    epilogue_cfg: [LaunchConfig; 2],
    dev: DevComm<'comm, Lsa>,
}

impl<'comm> Ranks<'comm> {
    fn new(comm: &'comm Communicator) -> std::result::Result<Self, Error> {
        // The fused kernels reduce over the LSA team: across nodes they would sum one node's ranks only.
        common::require_one_lsa_team(comm, "this example")?;
        let stream = comm.context().new_stream()?;
        let baseline = common::Baseline::load(comm.context(), "allreduce_epilogue", BASELINE)?;
        let (epilogues, epilogue_cfg) = baseline.per_type(comm, "allreduce_epilogue", &stream, BLOCK)?;
        let one_shot_cfg =
            [one_shot::one_wave::<f32>(comm, &stream, BLOCK)?, one_shot::one_wave::<half::bf16>(comm, &stream, BLOCK)?];
        let two_shot_cfg =
            [two_shot::one_wave::<f32>(comm, &stream, BLOCK)?, two_shot::one_wave::<half::bf16>(comm, &stream, BLOCK)?];
        let lamport_cfg =
            [lamport::one_wave::<f32>(comm, &stream, BLOCK)?, lamport::one_wave::<half::bf16>(comm, &stream, BLOCK)?];
        // One LSA barrier per block of the largest grid of either kernel.
        let mut requirements = Requirements::new();
        for cfg in &lamport_cfg {
            requirements = requirements.merge(&lamport::requirements(cfg));
        }
        for cfg in &one_shot_cfg {
            requirements = requirements.merge(&one_shot::requirements(cfg));
        }
        for cfg in &two_shot_cfg {
            requirements = requirements.merge(&two_shot::requirements(cfg));
        }
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&requirements)?;
        if comm.rank() == 0 {
            println!(
                "launch geometry (one full wave, {BLOCK} threads per block): one-shot {} / {} blocks, two-shot {} / {}, \
                 epilogue {} / {} (f32 / bf16)",
                one_shot_cfg[0].grid_dim.0,
                one_shot_cfg[1].grid_dim.0,
                two_shot_cfg[0].grid_dim.0,
                two_shot_cfg[1].grid_dim.0,
                epilogue_cfg[0].grid_dim.0,
                epilogue_cfg[1].grid_dim.0
            );
        }
        Ok(Ranks {
            comm,
            stopwatch: common::Stopwatch::new(comm.context())?,
            stream,
            epilogues,
            one_shot_cfg,
            lamport_cfg,
            two_shot_cfg,
            epilogue_cfg,
            dev,
        })
    }

    fn case<T: Real>(&self, rows: usize, hidden: usize, want: &[f64]) -> std::result::Result<Case, Error> {
        let (comm, stream) = (self.comm, &self.stream);
        let n = rows * hidden;
        let which = usize::from(common::type_name::<T>() == "bf16");
        let (one_cfg, two_cfg, epilogue_cfg) =
            (self.one_shot_cfg[which], self.two_shot_cfg[which], self.epilogue_cfg[which]);
        let epilogue = &self.epilogues[which];
        let dev = &self.dev;

        let mut x = comm.alloc_window::<T>(stream, n, WindowFlags::COLL_SYMMETRIC)?;
        x.buffer_mut().copy_from_host(&common::random_as::<T>(n, x_seed(comm.rank())))?;
        let y = comm.alloc_window::<T>(stream, n, WindowFlags::COLL_SYMMETRIC)?;
        let bias = stream.clone_htod(&common::random_as::<T>(hidden, BIAS_SEED))?;
        let residual = stream.clone_htod(&common::random_as::<T>(n, RESIDUAL_SEED))?;
        let mut reduced: CudaSlice<T> = stream.alloc_zeros(n)?;
        let poison = vec![T::nan(); n];
        let mut out = stream.clone_htod(&poison)?;

        // Checked runs, each on a poisoned output.
        one_shot::launch(stream, one_cfg, dev, &x, &bias, &residual, &mut out, n, hidden)?;
        let one_error = common::relative_error(&weft::host::cuda::download(stream, &out)?, want);
        stream.memcpy_htod(&poison, &mut out)?;
        two_shot::launch(stream, two_cfg, dev, &x, &y, &bias, &residual, &mut out, n, hidden)?;
        let two_error = common::relative_error(&weft::host::cuda::download(stream, &out)?, want);
        stream.memcpy_htod(&poison, &mut out)?;
        stream.memcpy_htod(&poison, &mut reduced)?;
        unfused(comm, stream, epilogue, epilogue_cfg, &x, &mut reduced, &bias, &residual, &mut out, hidden)?;
        let unfused_error = common::relative_error(&weft::host::cuda::download(stream, &out)?, want);
        stream.memcpy_htod(&poison, &mut out)?;
        let mut lamport = LamportAllReduce::<T>::new(comm, stream, self.lamport_cfg[which], n, hidden)?;
        lamport.launch(stream, dev, x.buffer(), &bias, &residual, &mut out)?;
        lamport.check()?;
        let lamport_error = common::relative_error(&weft::host::cuda::download(stream, &out)?, want);

        // The one-shot recorded into a CUDA graph once and replayed: the graph borrows what it records for its
        // life, and records weft buffers (docs/graphs.md).
        let graph_bias = DeviceBuffer::from_host(stream, &common::random_as::<T>(hidden, BIAS_SEED))?;
        let graph_residual = DeviceBuffer::from_host(stream, &common::random_as::<T>(n, RESIDUAL_SEED))?;
        let graph_out = DeviceBuffer::from_host(stream, &poison)?;
        let mut graph = Graph::capture(stream, |c| {
            one_shot::record(c, one_cfg, dev, &x, &graph_bias, &graph_residual, &graph_out, n, hidden)
        })?;
        graph.replay()?;
        let graph_error = common::relative_error(&graph.read(&graph_out)?, want);

        let times = common::time_variants(&self.stopwatch, stream, WARMUP, ITERATIONS, 5, |variant| match variant {
            0 => one_shot::launch(stream, one_cfg, dev, &x, &bias, &residual, &mut out, n, hidden),
            1 => two_shot::launch(stream, two_cfg, dev, &x, &y, &bias, &residual, &mut out, n, hidden),
            2 => lamport.launch(stream, dev, x.buffer(), &bias, &residual, &mut out),
            3 => unfused(comm, stream, epilogue, epilogue_cfg, &x, &mut reduced, &bias, &residual, &mut out, hidden),
            _ => graph.replay(),
        })?;
        graph.settle()?;
        // A timed Lamport round that found no peer's data in time is an error, not a wrong timing.
        lamport.check()?;
        drop(graph);
        weft::host::cuda::settle(stream)?;
        Ok(Case {
            dtype: common::type_name::<T>(),
            rows,
            hidden,
            element_bytes: std::mem::size_of::<T>(),
            times: [times[0], times[1], times[2], times[3], times[4]],
            errors: [one_error, two_error, lamport_error, unfused_error, graph_error],
            tolerance: T::TOLERANCE,
        })
    }
}

/// The unfused baseline: `ncclAllReduce(x -> reduced)`, then the hand-written epilogue
/// `out = reduced + bias + residual`.
#[allow(clippy::too_many_arguments)]
fn unfused<T: Real>(
    comm: &Communicator,
    stream: &Arc<CudaStream>,
    epilogue: &CudaFunction,
    cfg: LaunchConfig,
    x: &weft::host::Window<'_, T>,
    reduced: &mut CudaSlice<T>,
    bias: &CudaSlice<T>,
    residual: &CudaSlice<T>,
    out: &mut CudaSlice<T>,
    hidden: usize,
) -> std::result::Result<(), Error> {
    comm.all_reduce(x.buffer(), reduced, ReduceOp::Sum, stream)?;
    let n = reduced.len();
    let mut args = ArgBuffer::new();
    let reduced = args.slice_arg(reduced, stream)?.ptr;
    args.push(reduced);
    let bias = args.slice_arg(bias, stream)?.ptr;
    args.push(bias);
    let residual = args.slice_arg(residual, stream)?.ptr;
    args.push(residual);
    let out = args.slice_arg_mut(out, stream)?.ptr;
    args.push(out);
    args.push(n);
    args.push(hidden);
    // SAFETY: the arguments are allreduce_epilogue_{f32,bf16}'s (const T*, const T*, const T*, T*, size_t, size_t)
    // in order, for the T the function was chosen for; every buffer holds `n` elements (bias `hidden`) and is
    // borrowed by `args`, which is dropped after the launch so cudarc orders later uses after the kernel.
    unsafe { launch_raw(epilogue, stream, &cfg, &mut args)? };
    Ok(())
}
