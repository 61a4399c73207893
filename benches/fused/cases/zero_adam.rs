//! A ZeRO-style optimizer step (`kit/src/kernels/zero_adam.rs`): reduce-scatter of the gradients, AdamW on this
//! rank's shard (f32 master weights and moments), all-gather of the parameters, in one kernel; against
//! `ncclReduceScatter`, the hand-written update of `benches/cuda/zero_adam_epilogue.cu` and `ncclAllGather`.
//!
//! The message size is the gradient bytes per rank (`P` parameters of the element type). Both sides update
//! `master`, `m` and `v` in place, so every checked run starts from refilled state; timed runs keep stepping
//! (the values stay finite: `v` stays non-negative, `master` decays).

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream};
use weft::host::caps::Lsa;
use weft::host::jit::{self, KernelSpec};
use weft::host::launch::{launch_raw, ArgBuffer};
use weft::host::{Active, Communicator, DevComm, DeviceBuffer, LaunchConfig, ReduceOp, Window, WindowFlags};

use crate::harness::{grid_for, poison, poison_window, random_values, widen, BenchFloat, Case, Instance, Rank, Result};
use crate::kernels::zero_adam::zero_adam_step;
use crate::options::Dtype;
use crate::stats::seed;

/// The baseline's update kernel.
const EPILOGUE: &str = weft_kit::baselines::ZERO_ADAM_EPILOGUE;
const EPILOGUE_NAME: &str = "zero_adam_epilogue";
const BLOCK: u32 = 512;
/// Elements a thread of the baseline's update handles per trip.
const EPILOGUE_ELEMENTS_PER_THREAD: usize = 4;

/// AdamW hyperparameters (PyTorch's defaults but the weight decay), at step `STEP`.
const LR: f32 = 1e-3;
const BETA1: f32 = 0.9;
const BETA2: f32 = 0.999;
const EPS: f32 = 1e-8;
const WEIGHT_DECAY: f32 = 0.01;
const STEP: i32 = 10;

/// Input streams of a draw (see [`crate::stats::seed`]); master, m and v are those of the rank owning the shard.
const GRADS: u64 = 0;
const MASTER: u64 = 1;
const FIRST_MOMENT: u64 = 2;
const SECOND_MOMENT: u64 = 3;

/// The AdamW scalars as the kernels take them: bias corrections for `STEP`, gradients averaged over the ranks.
#[derive(Debug, Clone, Copy)]
struct Hyper {
    bias_correction1: f32,
    bias_correction2: f32,
    grad_scale: f32,
}

impl Hyper {
    fn new(nranks: usize) -> Hyper {
        Hyper {
            bias_correction1: 1.0 - BETA1.powi(STEP),
            bias_correction2: 1.0 - BETA2.powi(STEP),
            grad_scale: 1.0 / nranks as f32,
        }
    }
}

/// Reduce-scatter + AdamW + all-gather, fused vs NCCL + update kernel + NCCL.
#[derive(Debug)]
pub struct ZeroAdam;

impl Case for ZeroAdam {
    fn name(&self) -> &'static str {
        "zero_adam"
    }

    fn fused(&self) -> &'static str {
        "zero_adam_step (kit/src/kernels/zero_adam.rs): reduce-scatter + AdamW on the shard + all-gather"
    }

    fn baseline(&self) -> &'static str {
        "ncclReduceScatter + zero_adam_epilogue kernel (benches/cuda/zero_adam_epilogue.cu) + ncclAllGather"
    }

    fn bytes_moved(&self, dtype: Dtype, bytes: usize, nranks: usize) -> u64 {
        let element = match dtype {
            Dtype::F32 => 4,
            Dtype::Bf16 => 2,
        };
        let shard = (bytes / element / nranks.max(1)) as u64;
        // Gradients: each element read once (by its shard's owner); master, m, v (f32): read and written for
        // this rank's shard; parameters: every element written once, by its owner.
        bytes as u64 + 24 * shard + bytes as u64
    }

    fn cuda_sources(&self) -> &'static [(&'static str, &'static str)] {
        &[(EPILOGUE_NAME, EPILOGUE)]
    }

    fn setup<'comm>(
        &self,
        rank: &Rank<'comm>,
        dtype: Dtype,
        bytes: usize,
        sets: usize,
    ) -> Result<Box<dyn Instance + 'comm>> {
        Ok(match dtype {
            Dtype::F32 => Box::new(Run::<f32>::new(rank, bytes, sets)?),
            Dtype::Bf16 => Box::new(Run::<half::bf16>::new(rank, bytes, sets)?),
        })
    }
}

/// One input/output set.
struct Set<'comm, T: BenchFloat> {
    /// This rank's gradients, all parameters.
    grads: Window<'comm, T>,
    /// The parameters, all of them, on every rank (the fused kernel stores into every peer's).
    params: Window<'comm, T>,
    /// This rank's shard of the optimizer state.
    master: DeviceBuffer<f32>,
    m: DeviceBuffer<f32>,
    v: DeviceBuffer<f32>,
    /// The baseline's intermediates: the reduced gradient shard and the updated parameter shard.
    grad: DeviceBuffer<T>,
    param: DeviceBuffer<T>,
}

struct Run<'comm, T: BenchFloat> {
    comm: &'comm Communicator<Active>,
    stream: Arc<CudaStream>,
    dev: DevComm<'comm, Lsa>,
    fused_cfg: LaunchConfig,
    epilogue: CudaFunction,
    epilogue_cfg: LaunchConfig,
    hyper: Hyper,
    /// Parameters in all (a multiple of the rank count: NCCL's reduce-scatter splits evenly).
    n: usize,
    sets: Vec<Set<'comm, T>>,
    /// With `WEFT_TRACE` set: an event after each step of the unfused run (reduce-scatter, update, all-gather),
    /// re-recorded every run, for [`Instance::progress`].
    marks: Option<[CudaEvent; 3]>,
}

/// The unfused run's steps, in the order [`Run::marks`] follows them.
const STEPS: [&str; 3] = ["ncclReduceScatter", "the update kernel", "ncclAllGather"];

impl<'comm, T: BenchFloat> Run<'comm, T> {
    fn new(rank: &Rank<'comm>, bytes: usize, sets: usize) -> Result<Run<'comm, T>> {
        let (comm, stream) = (rank.comm, rank.stream.clone());
        let nranks = comm.nranks();
        let n = ((bytes / std::mem::size_of::<T>()) / nranks * nranks).max(nranks);
        let shard = n / nranks;
        // One 16-byte pack of parameters per thread per trip.
        let packs = shard.div_ceil(weft::device::pack_lanes::<T>());
        let (fused_cfg, wave) = grid_for(comm, &zero_adam_step::function::<T>(comm.context())?, &stream, BLOCK, packs)?;
        let dev = comm.dev_comm(&zero_adam_step::requirements(&wave))?;
        let epilogue_spec = KernelSpec {
            name: EPILOGUE_NAME,
            source: EPILOGUE,
            entry_point: match T::DTYPE {
                Dtype::F32 => "zero_adam_epilogue_f32",
                Dtype::Bf16 => "zero_adam_epilogue_bf16",
            },
        };
        let epilogue = jit::function(comm.context(), &epilogue_spec)?;
        let (epilogue_cfg, _) =
            grid_for(comm, &epilogue, &stream, BLOCK, shard.div_ceil(EPILOGUE_ELEMENTS_PER_THREAD))?;
        let sets = (0..sets)
            .map(|_| {
                Ok(Set {
                    grads: comm.alloc_window::<T>(&stream, n, WindowFlags::COLL_SYMMETRIC)?,
                    params: comm.alloc_window::<T>(&stream, n, WindowFlags::COLL_SYMMETRIC)?,
                    master: DeviceBuffer::new(&stream, shard)?,
                    m: DeviceBuffer::new(&stream, shard)?,
                    v: DeviceBuffer::new(&stream, shard)?,
                    grad: DeviceBuffer::new(&stream, shard)?,
                    param: DeviceBuffer::new(&stream, shard)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let hyper = Hyper::new(nranks);
        // WEFT_BENCH_MARKS=0 leaves them out under the trace too: they change the timing of the zero_adam stop at 8
        // ranks (1 stop in 12 runs with them, 15 in 19 without; docs/multi-rank.md).
        let marking =
            std::env::var_os("WEFT_TRACE").is_some() && std::env::var_os("WEFT_BENCH_MARKS").is_none_or(|v| v != "0");
        let marks = if marking {
            let mark = || comm.context().new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING));
            Some([mark()?, mark()?, mark()?])
        } else {
            None
        };
        Ok(Run { comm, stream, dev, fused_cfg, epilogue, epilogue_cfg, hyper, n, sets, marks })
    }

    fn shard(&self) -> usize {
        self.n / self.comm.nranks()
    }
}

/// Rank `owner`'s optimizer state for a draw: master weights and first moments in [-1, 1), second moments in
/// [0, 1) (a second moment is never negative).
fn state(draw: u64, owner: usize, shard: usize) -> [Vec<f32>; 3] {
    let master = random_values::<f32>(seed(draw, owner, MASTER), shard);
    let m = random_values::<f32>(seed(draw, owner, FIRST_MOMENT), shard);
    let v = random_values::<f32>(seed(draw, owner, SECOND_MOMENT), shard).into_iter().map(f32::abs).collect();
    [master, m, v]
}

impl<T: BenchFloat> Instance for Run<'_, T> {
    fn fill(&mut self, set: usize, draw: u64) -> Result<()> {
        let (rank, n, shard) = (self.comm.rank(), self.n, self.shard());
        let s = &mut self.sets[set];
        s.grads.buffer_mut().copy_from_host(&random_values::<T>(seed(draw, rank, GRADS), n))?;
        let [master, m, v] = state(draw, rank, shard);
        s.master.copy_from_host(&master)?;
        s.m.copy_from_host(&m)?;
        s.v.copy_from_host(&v)
    }

    fn poison(&mut self, set: usize) -> Result<()> {
        let s = &mut self.sets[set];
        poison_window(s.params.buffer_mut())?;
        poison(&mut s.grad)?;
        poison(&mut s.param)
    }

    fn run_fused(&mut self, set: usize) -> Result<()> {
        let (h, s) = (self.hyper, &mut self.sets[set]);
        zero_adam_step::launch(
            &self.stream,
            self.fused_cfg,
            &self.dev,
            &s.grads,
            &s.params,
            &mut s.master,
            &mut s.m,
            &mut s.v,
            self.n,
            LR,
            BETA1,
            BETA2,
            EPS,
            WEIGHT_DECAY,
            h.bias_correction1,
            h.bias_correction2,
            h.grad_scale,
        )
    }

    fn run_unfused(&mut self, set: usize) -> Result<()> {
        let shard = self.shard();
        let (h, s) = (self.hyper, &mut self.sets[set]);
        self.comm.reduce_scatter(s.grads.buffer(), &mut s.grad, ReduceOp::Sum, &self.stream)?;
        let mark = |step: usize| self.marks.as_ref().map_or(Ok(()), |marks| marks[step].record(&self.stream));
        mark(0)?;
        let mut args = ArgBuffer::new();
        args.push(s.grad.device_address());
        args.push(s.master.device_address());
        args.push(s.m.device_address());
        args.push(s.v.device_address());
        args.push(s.param.device_address());
        args.push(shard);
        for scalar in [LR, BETA1, BETA2, EPS, WEIGHT_DECAY, h.bias_correction1, h.bias_correction2, h.grad_scale] {
            args.push(scalar);
        }
        // SAFETY: zero_adam_epilogue_{f32,bf16} take (const T* grad, float* master, float* m, float* v, T* param,
        // size_t count, then eight floats: lr, beta1, beta2, eps, weight_decay, bias_correction1,
        // bias_correction2, grad_scale), pushed above in order; every array holds `shard` elements (grad and
        // param of the T the entry point was chosen for, the rest f32), all on this stream's device, and all
        // outlive the run (the instance is dropped only after the stream is synchronized, and DeviceBuffer's
        // drop synchronizes too).
        unsafe { launch_raw(&self.epilogue, &self.stream, &self.epilogue_cfg, &mut args)? };
        mark(1)?;
        self.comm.all_gather(&s.param, &mut s.params.buffer_mut(), &self.stream)?;
        Ok(mark(2)?)
    }

    fn progress(&self) -> Option<String> {
        let marks = self.marks.as_ref()?;
        let state = |mark: &CudaEvent| match mark.try_is_complete() {
            Ok(true) => "done",
            Ok(false) => "not done",
            Err(_) => "unknown",
        };
        let steps: Vec<String> =
            STEPS.iter().zip(marks).map(|(step, mark)| format!("{step} {}", state(mark))).collect();
        Some(steps.join(", "))
    }

    fn outputs(&mut self, set: usize) -> Result<Vec<Vec<f64>>> {
        let s = &self.sets[set];
        let state = |buffer: &DeviceBuffer<f32>| -> Result<Vec<f64>> {
            Ok(buffer.copy_to_host()?.into_iter().map(f64::from).collect())
        };
        Ok(vec![widen(&s.params.buffer().copy_to_host()?), state(&s.master)?, state(&s.m)?, state(&s.v)?])
    }

    fn reference(&self, draw: u64) -> Vec<Vec<f64>> {
        let (nranks, n, shard) = (self.comm.nranks(), self.n, self.shard());
        let mut gradient = vec![0.0; n];
        for rank in 0..nranks {
            for (acc, g) in gradient.iter_mut().zip(random_values::<T>(seed(draw, rank, GRADS), n)) {
                *acc += g.widen();
            }
        }
        let (beta1, beta2, lr, eps, decay) =
            (f64::from(BETA1), f64::from(BETA2), f64::from(LR), f64::from(EPS), f64::from(WEIGHT_DECAY));
        let (bc1, bc2) = (1.0 - beta1.powi(STEP), 1.0 - beta2.powi(STEP));
        let mut params = vec![0.0; n];
        let mut mine = [Vec::new(), Vec::new(), Vec::new()];
        for owner in 0..nranks {
            let [master, m, v] = state(draw, owner, shard);
            let mut updated = [vec![0.0; shard], vec![0.0; shard], vec![0.0; shard]];
            for o in 0..shard {
                let g = gradient[owner * shard + o] / nranks as f64;
                let first = beta1 * f64::from(m[o]) + (1.0 - beta1) * g;
                let second = beta2 * f64::from(v[o]) + (1.0 - beta2) * g * g;
                let weight = f64::from(master[o]);
                let step = (first / bc1) / ((second / bc2).sqrt() + eps);
                let new_weight = weight - lr * (step + decay * weight);
                params[owner * shard + o] = new_weight;
                updated[0][o] = new_weight;
                updated[1][o] = first;
                updated[2][o] = second;
            }
            if owner == self.comm.rank() {
                mine = updated;
            }
        }
        let [master, m, v] = mine;
        vec![params, master, m, v]
    }
}
