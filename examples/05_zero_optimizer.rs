//! A ZeRO-style optimizer step — reduce-scatter of the gradients, AdamW on this rank's shard, all-gather of the
//! updated parameters — as one weft kernel over LSA, against `ncclReduceScatter` + an AdamW kernel +
//! `ncclAllGather`, on every visible GPU.
//!
//! ```sh
//! cargo run --release --example zero_optimizer
//! ```
//!
//! Data parallelism with sharded optimizer state: every rank has the full gradient of `P` parameters (in `T`:
//! f32 or bf16) and owns `1/R` of the f32 master weights and Adam moments. Both ways are checked against an f64
//! host reference (parameters, master weights and moments, outputs poisoned first) and timed with CUDA events
//! (median of 20 after 3 warm-up rounds, interleaved):
//!
//! - fused (`kernels/zero_adam.rs`): one kernel; each thread sums a gradient element over every peer's window,
//!   updates its shard's state, and stores the new parameter into every rank's parameter window (the all-gather
//!   is that store; why one kernel and not two phases or two kernels is explained in the kernel's docs);
//! - unfused: `ncclReduceScatter(grads -> grad)`, `benches/cuda/zero_adam_epilogue.cu` (AdamW, vector loads),
//!   `ncclAllGather(param -> params)`.
//!
//! Bytes per rank, `S = P / R`, `s` bytes per element of `T` (state is f32: 12 bytes read and written per
//! parameter of the shard):
//!
//! | variant | reads | writes | one rank, f32 / bf16 |
//! |---|---|---|---|
//! | fused | `R·S·s` (gradients) + `12S` | `12S` + `R·S·s` (parameters, to every rank) | `32P` / `28P` |
//! | unfused | reduce-scatter's + `S·s` + `12S` | reduce-scatter's `S·s` + `12S` + `S·s` + all-gather's `P·s` | `48P` / `36P` |
//!
//! So on one GPU the fused step should approach 1.5x (f32) and 1.29x (bf16) the unfused speed where both are
//! bandwidth-bound.
//!
//! Needs every rank in one LSA team. On a machine without a GPU it compiles the kernel and the baseline with nvcc
//! against every NCCL release's headers it finds, says so, and exits 0.

use weft_kit::common;
use weft_kit::kernels;

use std::sync::Arc;

use common::{Real, Result};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream};
use kernels::zero_adam::zero_adam_step as fused;
use weft::host::caps::Lsa;
use weft::host::launch::{launch_raw, ArgBuffer};
use weft::host::{Communicator, Config, DevComm, Error, LaunchConfig, ReduceOp, Window, WindowFlags};

const BASELINE: &str = weft_kit::baselines::ZERO_ADAM_EPILOGUE;
/// Parameter counts before rounding up to a multiple of `4 x ranks`.
const SIZES: &[usize] = &[1 << 18, 1 << 21, 1 << 24];
const BLOCK: u32 = 512;
const WARMUP: usize = 3;
const ITERATIONS: usize = 20;

/// AdamW's settings for the step taken (step `STEP`, as if nine came before).
#[derive(Clone, Copy)]
struct Hyper {
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    bias_correction1: f32,
    bias_correction2: f32,
    grad_scale: f32,
}

const STEP: i32 = 10;

impl Hyper {
    fn new(nranks: usize) -> Hyper {
        let (beta1, beta2) = (0.9f32, 0.999f32);
        Hyper {
            lr: 1e-3,
            beta1,
            beta2,
            eps: 1e-8,
            weight_decay: 0.01,
            bias_correction1: 1.0 - beta1.powi(STEP),
            bias_correction2: 1.0 - beta2.powi(STEP),
            grad_scale: 1.0 / nranks as f32,
        }
    }
}

fn main() -> Result<()> {
    println!("weft example 05 — ZeRO optimizer step: reduce-scatter + AdamW + all-gather in one LSA kernel\n");
    match common::gpus() {
        Ok(_) => run(),
        Err(why) => common::without_gpu(
            &why,
            &[fused::compile_check],
            &[("zero_adam_epilogue", BASELINE)],
            &format!(
                "runs one rank per GPU (WEFT_RANKS=n runs n) and, for {SIZES:?} parameters in f32 and bf16 (f32 optimizer state), takes an \
                 AdamW step on sharded state with the fused kernel and with ncclReduceScatter + the AdamW kernel + \
                 ncclAllGather, checks both against an f64 host reference and prints their median times and the \
                 speedup."
            ),
        ),
    }
}

fn grad_seed(rank: usize) -> u64 {
    3000 + rank as u64
}
const MASTER_SEED: u64 = 5;
const M_SEED: u64 = 6;
const V_SEED: u64 = 7;

/// The optimizer state before the step, for all `p` parameters (each rank uploads its shard).
struct State {
    master: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
}

impl State {
    fn initial(p: usize) -> State {
        State {
            master: common::random(p, MASTER_SEED),
            m: common::random(p, M_SEED).iter().map(|x| 0.1 * x).collect(),
            v: common::random(p, V_SEED).iter().map(|x| 0.01 * x * x).collect(),
        }
    }
}

/// The step in f64 from the same inputs: (master, m, v) after it, for all parameters.
fn reference<T: Real>(nranks: usize, p: usize, h: Hyper) -> [Vec<f64>; 3] {
    let mut g = vec![0.0f64; p];
    for rank in 0..nranks {
        for (acc, x) in g.iter_mut().zip(common::random_as::<T>(p, grad_seed(rank))) {
            *acc += x.value();
        }
    }
    let state = State::initial(p);
    let (b1, b2) = (f64::from(h.beta1), f64::from(h.beta2));
    let mut out = [vec![0.0; p], vec![0.0; p], vec![0.0; p]];
    for i in 0..p {
        let g = g[i] * f64::from(h.grad_scale);
        let m = b1 * f64::from(state.m[i]) + (1.0 - b1) * g;
        let v = b2 * f64::from(state.v[i]) + (1.0 - b2) * g * g;
        let w = f64::from(state.master[i]);
        let step =
            (m / f64::from(h.bias_correction1)) / ((v / f64::from(h.bias_correction2)).sqrt() + f64::from(h.eps));
        out[0][i] = w - f64::from(h.lr) * (step + f64::from(h.weight_decay) * w);
        out[1][i] = m;
        out[2][i] = v;
    }
    out
}

struct Case {
    dtype: &'static str,
    params: usize,
    element_bytes: usize,
    /// Median µs: fused, unfused.
    times: [f64; 2],
    /// Relative errors of (parameters, worst of master/m/v): fused, unfused.
    errors: [(f64, f64); 2],
    tolerance: f64,
}

impl Case {
    fn passed(&self) -> bool {
        self.errors.iter().all(|(a, b)| *a < self.tolerance && *b < self.tolerance)
    }
}

fn run() -> Result<()> {
    let ranks = common::Ranks::from_env()?;
    let nranks = ranks.nranks();
    println!("{nranks} rank(s); computing the host references...");
    let hyper = Hyper::new(nranks);
    let sizes: Vec<usize> = SIZES.iter().map(|p| p.div_ceil(4 * nranks) * 4 * nranks).collect();
    let references_f32: Vec<[Vec<f64>; 3]> = sizes.iter().map(|&p| reference::<f32>(nranks, p, hyper)).collect();
    let references_bf16: Vec<[Vec<f64>; 3]> =
        sizes.iter().map(|&p| reference::<half::bf16>(nranks, p, hyper)).collect();
    let reports = ranks.run(&Config::new(), |comm| {
        let rank = Rank::new(comm)?;
        let mut cases = Vec::new();
        for (s, &p) in sizes.iter().enumerate() {
            cases.push(rank.case::<f32>(p, hyper, &references_f32[s])?);
            cases.push(rank.case::<half::bf16>(p, hyper, &references_bf16[s])?);
        }
        Ok(cases)
    })?;

    let first = ranks.first_rank();
    println!("\n{nranks} rank(s); rank {first}'s median times in µs (every rank's result is checked)\n");
    println!(
        "{:>5} {:>10} | {:>9} {:>9} {:>7} | {:>10} | {:>9} {:>9} {:>9} {:>9}",
        "type", "params", "fused", "unfused", "speedup", "fused GB/s", "err par", "err state", "unf par", "unf state"
    );
    for (c, case) in reports[0].iter().enumerate() {
        let worst = |k: usize, state: bool| {
            common::worst(reports.iter().map(|r| if state { r[c].errors[k].1 } else { r[c].errors[k].0 }))
        };
        let shard = case.params / nranks;
        let fused_bytes = shard * (24 + 2 * nranks * case.element_bytes);
        println!(
            "{:>5} {:>10} | {:>9.1} {:>9.1} {:>6.2}x | {:>10.0} | {:>9.1e} {:>9.1e} {:>9.1e} {:>9.1e}",
            case.dtype,
            case.params,
            case.times[0],
            case.times[1],
            case.times[1] / case.times[0],
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
                    "rank {rank} {} {} parameters: (params, state) errors fused {:?}, unfused {:?} (limit {})",
                    c.dtype, c.params, c.errors[0], c.errors[1], c.tolerance
                )
            })
        })
        .collect();
    common::verdict(&failed, "f32 < 1e-5, bf16 < 1e-2")
}

struct Rank<'comm> {
    comm: &'comm Communicator,
    stream: Arc<CudaStream>,
    stopwatch: common::Stopwatch,
    /// One full wave of (fused, AdamW epilogue), per type (f32, bf16).
    waves: [(LaunchConfig, LaunchConfig); 2],
    epilogues: [CudaFunction; 2],
    dev: DevComm<'comm, Lsa>,
}

/// A shard of optimizer state on the GPU.
struct DeviceState {
    master: CudaSlice<f32>,
    m: CudaSlice<f32>,
    v: CudaSlice<f32>,
}

impl DeviceState {
    fn upload(
        stream: &Arc<CudaStream>,
        state: &State,
        range: std::ops::Range<usize>,
    ) -> std::result::Result<Self, Error> {
        Ok(DeviceState {
            master: stream.clone_htod(&state.master[range.clone()])?,
            m: stream.clone_htod(&state.m[range.clone()])?,
            v: stream.clone_htod(&state.v[range])?,
        })
    }

    /// The worst relative error of master, m and v against the reference's `range`.
    fn error(
        &self,
        stream: &Arc<CudaStream>,
        want: &[Vec<f64>; 3],
        range: std::ops::Range<usize>,
    ) -> std::result::Result<f64, Error> {
        let errors = [
            common::relative_error(&weft::host::cuda::download(stream, &self.master)?, &want[0][range.clone()]),
            common::relative_error(&weft::host::cuda::download(stream, &self.m)?, &want[1][range.clone()]),
            common::relative_error(&weft::host::cuda::download(stream, &self.v)?, &want[2][range]),
        ];
        Ok(common::worst(errors))
    }
}

impl<'comm> Rank<'comm> {
    fn new(comm: &'comm Communicator) -> std::result::Result<Self, Error> {
        common::require_one_lsa_team(comm, "this example")?;
        let stream = comm.context().new_stream()?;
        let baseline = common::Baseline::load(comm.context(), "zero_adam_epilogue", BASELINE)?;
        let (epilogues, epilogue_waves) = baseline.per_type(comm, "zero_adam_epilogue", &stream, BLOCK)?;
        let fused_waves =
            [fused::one_wave::<f32>(comm, &stream, BLOCK)?, fused::one_wave::<half::bf16>(comm, &stream, BLOCK)?];
        let waves = [(fused_waves[0], epilogue_waves[0]), (fused_waves[1], epilogue_waves[1])];
        let requirements = fused::requirements(&waves[0].0).merge(&fused::requirements(&waves[1].0));
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&requirements)?;
        if comm.rank() == 0 {
            println!(
                "launch geometry (one full wave, {BLOCK} threads per block): fused {} / {} blocks, AdamW {} / {} \
                 (f32 / bf16)",
                waves[0].0.grid_dim.0, waves[1].0.grid_dim.0, waves[0].1.grid_dim.0, waves[1].1.grid_dim.0
            );
        }
        Ok(Rank { comm, stopwatch: common::Stopwatch::new(comm.context())?, stream, waves, epilogues, dev })
    }

    fn case<T: Real>(&self, p: usize, h: Hyper, want: &[Vec<f64>; 3]) -> std::result::Result<Case, Error> {
        let (comm, stream, dev) = (self.comm, &self.stream, &self.dev);
        let (nranks, rank) = (comm.nranks(), comm.rank());
        let shard = p / nranks;
        let mine = rank * shard..(rank + 1) * shard;
        let which = usize::from(common::type_name::<T>() == "bf16");
        let (fused_cfg, epilogue_cfg) = self.waves[which];
        let epilogue = &self.epilogues[which];

        let mut grads = comm.alloc_window::<T>(stream, p, WindowFlags::COLL_SYMMETRIC)?;
        grads.buffer_mut().copy_from_host(&common::random_as::<T>(p, grad_seed(rank)))?;
        let mut params = comm.alloc_window::<T>(stream, p, WindowFlags::COLL_SYMMETRIC)?;
        let initial = State::initial(p);
        let mut fused_state = DeviceState::upload(stream, &initial, mine.clone())?;
        let mut unfused_state = DeviceState::upload(stream, &initial, mine.clone())?;
        drop(initial);
        let poison = vec![T::nan(); p];
        let grad: CudaSlice<T> = stream.clone_htod(&poison[..shard])?;
        let param: CudaSlice<T> = stream.clone_htod(&poison[..shard])?;
        let gathered: CudaSlice<T> = stream.clone_htod(&poison)?;

        // Checked runs: one step each from the same state, parameter outputs poisoned. Peers write into `params`
        // only after this rank's kernel passed its first barrier, after the poisoning below.
        params.buffer_mut().copy_from_host(&poison)?;
        let launch_fused = |state: &mut DeviceState| {
            fused::launch(
                stream,
                fused_cfg,
                dev,
                &grads,
                &params,
                &mut state.master,
                &mut state.m,
                &mut state.v,
                p,
                h.lr,
                h.beta1,
                h.beta2,
                h.eps,
                h.weight_decay,
                h.bias_correction1,
                h.bias_correction2,
                h.grad_scale,
            )
        };
        launch_fused(&mut fused_state)?;
        weft::host::cuda::settle(stream)?;
        let fused_errors = (
            common::relative_error(&params.buffer().copy_to_host()?, &want[0]),
            fused_state.error(stream, want, mine.clone())?,
        );
        let mut baseline = Unfused { comm, stream, epilogue, cfg: epilogue_cfg, grad, param, gathered, hyper: h };
        baseline.step(&grads, &mut unfused_state)?;
        weft::host::cuda::settle(stream)?;
        let unfused_errors = (
            common::relative_error(&weft::host::cuda::download(stream, &baseline.gathered)?, &want[0]),
            unfused_state.error(stream, want, mine)?,
        );

        let times = common::time_variants(&self.stopwatch, stream, WARMUP, ITERATIONS, 2, |variant| match variant {
            0 => launch_fused(&mut fused_state),
            _ => baseline.step(&grads, &mut unfused_state),
        })?;
        weft::host::cuda::settle(stream)?;
        Ok(Case {
            dtype: common::type_name::<T>(),
            params: p,
            element_bytes: std::mem::size_of::<T>(),
            times: [times[0], times[1]],
            errors: [fused_errors, unfused_errors],
            tolerance: T::TOLERANCE,
        })
    }
}

/// The unfused baseline's buffers and kernel: `ncclReduceScatter(grads -> grad)`, the hand-written AdamW on this
/// rank's shard (`grad`, state -> state, `param`), `ncclAllGather(param -> gathered)`.
struct Unfused<'a, T: Real> {
    comm: &'a Communicator,
    stream: &'a Arc<CudaStream>,
    epilogue: &'a CudaFunction,
    cfg: LaunchConfig,
    grad: CudaSlice<T>,
    param: CudaSlice<T>,
    gathered: CudaSlice<T>,
    hyper: Hyper,
}

impl<T: Real> Unfused<'_, T> {
    fn step(&mut self, grads: &Window<'_, T>, state: &mut DeviceState) -> std::result::Result<(), Error> {
        let (stream, h) = (self.stream, self.hyper);
        let shard = self.param.len();
        self.comm.reduce_scatter(grads.buffer(), &mut self.grad, ReduceOp::Sum, stream)?;
        {
            let mut args = ArgBuffer::new();
            let pointers = [
                args.slice_arg(&self.grad, stream)?.ptr,
                args.slice_arg_mut(&mut state.master, stream)?.ptr,
                args.slice_arg_mut(&mut state.m, stream)?.ptr,
                args.slice_arg_mut(&mut state.v, stream)?.ptr,
                args.slice_arg_mut(&mut self.param, stream)?.ptr,
            ];
            for pointer in pointers {
                args.push(pointer);
            }
            args.push(shard);
            let scalars =
                [h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.bias_correction1, h.bias_correction2, h.grad_scale];
            for scalar in scalars {
                args.push(scalar);
            }
            // SAFETY: the arguments are zero_adam_epilogue_{f32,bf16}'s (const T* grad, float* master, float* m,
            // float* v, T* param, size_t count, then eight floats) in order, for the T the function was chosen
            // for; every buffer holds `shard` elements and is borrowed by `args`, which is dropped after the launch
            // so cudarc orders later uses after the kernel.
            unsafe { launch_raw(self.epilogue, stream, &self.cfg, &mut args)? };
        }
        self.comm.all_gather(&self.param, &mut self.gathered, stream)
    }
}
