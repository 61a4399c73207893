//! All-reduce + bias + residual, the epilogue of a tensor-parallel row-parallel linear layer
//! (`kit/src/kernels/allreduce_epilogue.rs`), against `ncclAllReduce` followed by the hand-written epilogue
//! kernel of `benches/cuda/allreduce_epilogue.cu`:
//!
//! ```text
//! out[r][c] = Σ_ranks x[r][c] + bias[c] + residual[r][c]        (x, residual, out: rows × hidden)
//! ```
//!
//! Three cases, one per fused algorithm: one-shot (every rank reduces everything, two LSA barriers), two-shot
//! (reduce-scatter with the epilogue, then all-gather through a second window) and Lamport (one-shot without a
//! barrier: the data carries its own "written" mark, `kit/src/kernels/allreduce_lamport.rs`). The baseline is the
//! same for all three.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream};
use weft::host::caps::Lsa;
use weft::host::jit::{self, KernelSpec};
use weft::host::launch::{launch_raw, ArgBuffer};
use weft::host::{Active, Capture, Communicator, DevComm, DeviceBuffer, LaunchConfig, ReduceOp, Window, WindowFlags};

use crate::harness::{
    grid_for, poison, poison_window, random_values, widen, BenchFloat, Case, Instance, Rank, Result, Side,
};
use crate::kernels::allreduce_epilogue::{allreduce_bias_residual_one_shot, allreduce_bias_residual_two_shot};
use crate::kernels::allreduce_lamport::allreduce_bias_residual_lamport;
use crate::options::Dtype;
use crate::stats::seed;
use weft_kit::lamport::LamportAllReduce;

/// The baseline's epilogue kernel.
const EPILOGUE: &str = weft_kit::baselines::ALLREDUCE_EPILOGUE;
const EPILOGUE_NAME: &str = "allreduce_epilogue";
/// The hidden dimension (columns): a typical transformer width; smaller messages are one row of all elements.
const HIDDEN: usize = 4096;
const BLOCK: u32 = 512;

/// Input streams of a draw (see [`crate::stats::seed`]).
const X: u64 = 0;
const BIAS: u64 = 1;
const RESIDUAL: u64 = 2;

/// The fused algorithm a case measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Every rank reduces everything, between two LSA barriers.
    OneShot,
    /// Reduce-scatter with the epilogue, then all-gather.
    TwoShot,
    /// One-shot without a barrier (Lamport packs in three rotating buffers).
    Lamport,
}

/// `out = Σ_ranks x + bias + residual`, fused, vs `ncclAllReduce` + epilogue kernel.
#[derive(Debug)]
pub struct AllReduceBiasResidual {
    /// Which fused kernel.
    pub algorithm: Algorithm,
}

impl Case for AllReduceBiasResidual {
    fn name(&self) -> &'static str {
        match self.algorithm {
            Algorithm::OneShot => "allreduce_bias_residual_1shot",
            Algorithm::TwoShot => "allreduce_bias_residual_2shot",
            Algorithm::Lamport => "allreduce_bias_residual_lamport",
        }
    }

    fn fused(&self) -> &'static str {
        match self.algorithm {
            Algorithm::OneShot => "allreduce_bias_residual_one_shot (kit/src/kernels/allreduce_epilogue.rs)",
            Algorithm::TwoShot => "allreduce_bias_residual_two_shot (kit/src/kernels/allreduce_epilogue.rs)",
            Algorithm::Lamport => "allreduce_bias_residual_lamport (kit/src/kernels/allreduce_lamport.rs): no barrier",
        }
    }

    fn not_capturable(&self) -> Option<&'static str> {
        None
    }

    fn baseline(&self) -> &'static str {
        "ncclAllReduce + allreduce_epilogue kernel (benches/cuda/allreduce_epilogue.cu)"
    }

    fn bytes_moved(&self, dtype: Dtype, bytes: usize, nranks: usize) -> u64 {
        let (n, p) = (bytes as u64, nranks as u64);
        let bias = (hidden(bytes / element_bytes(dtype)) * element_bytes(dtype)) as u64;
        match self.algorithm {
            // x: every element read once (slice by slice, by its owner); residual: this rank's slice; y: this
            // rank's slice written, then read by each peer; out: written whole.
            Algorithm::TwoShot => n + n.div_ceil(p) + n.div_ceil(p) + (p - 1) * n.div_ceil(p) + n + bias,
            // x: read by this rank and by each peer; residual read and out written once.
            Algorithm::OneShot => p * n + n + n + bias,
            // x: read once and pushed to every rank's buffer; every rank's slot polled and cleared; residual read
            // and out written once.
            Algorithm::Lamport => n + p * n + p * n + p * n + n + n + bias,
        }
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
            Dtype::F32 => Box::new(Run::<f32>::new(rank, self.algorithm, bytes, sets)?),
            Dtype::Bf16 => Box::new(Run::<half::bf16>::new(rank, self.algorithm, bytes, sets)?),
        })
    }
}

fn element_bytes(dtype: Dtype) -> usize {
    match dtype {
        Dtype::F32 => 4,
        Dtype::Bf16 => 2,
    }
}

/// Columns for `n` elements: [`HIDDEN`], or all of them in one row when there are fewer.
fn hidden(n: usize) -> usize {
    HIDDEN.min(n).max(1)
}

/// One input/output set.
struct Set<'comm, T: BenchFloat> {
    x: Window<'comm, T>,
    /// The two-shot kernel's scratch window (absent for the one-shot).
    y: Option<Window<'comm, T>>,
    residual: DeviceBuffer<T>,
    /// The baseline's all-reduce result, the epilogue's input.
    reduced: DeviceBuffer<T>,
    out: DeviceBuffer<T>,
}

struct Run<'comm, T: BenchFloat> {
    comm: &'comm Communicator<Active>,
    stream: Arc<CudaStream>,
    dev: DevComm<'comm, Lsa>,
    fused_cfg: LaunchConfig,
    epilogue: CudaFunction,
    epilogue_cfg: LaunchConfig,
    n: usize,
    hidden: usize,
    bias: DeviceBuffer<T>,
    sets: Vec<Set<'comm, T>>,
    /// The Lamport kernel's rotating buffers and rounds (that algorithm only).
    lamport: Option<LamportAllReduce<'comm, T>>,
}

impl<'comm, T: BenchFloat> Run<'comm, T> {
    fn new(rank: &Rank<'comm>, algorithm: Algorithm, bytes: usize, sets: usize) -> Result<Run<'comm, T>> {
        let (comm, stream) = (rank.comm, rank.stream.clone());
        let n = (bytes / std::mem::size_of::<T>()).max(1);
        let hidden = hidden(n);
        let two_shot = algorithm == Algorithm::TwoShot;
        let function = match algorithm {
            Algorithm::OneShot => allreduce_bias_residual_one_shot::function::<T>(comm.context())?,
            Algorithm::TwoShot => allreduce_bias_residual_two_shot::function::<T>(comm.context())?,
            Algorithm::Lamport => allreduce_bias_residual_lamport::function::<T>(comm.context())?,
        };
        // Both sides handle one 16-byte pack per thread per trip.
        let vector = weft::device::pack_lanes::<T>();
        let (fused_cfg, wave) = grid_for(comm, &function, &stream, BLOCK, n.div_ceil(vector))?;
        let requirements = match algorithm {
            Algorithm::OneShot => allreduce_bias_residual_one_shot::requirements(&wave),
            Algorithm::TwoShot => allreduce_bias_residual_two_shot::requirements(&wave),
            Algorithm::Lamport => allreduce_bias_residual_lamport::requirements(&wave),
        };
        let dev = comm.dev_comm(&requirements)?;
        let lamport = match algorithm {
            Algorithm::Lamport => Some(LamportAllReduce::new(comm, &stream, fused_cfg, n, hidden)?),
            _ => None,
        };

        let epilogue_spec = KernelSpec {
            name: EPILOGUE_NAME,
            source: EPILOGUE,
            entry_point: match T::DTYPE {
                Dtype::F32 => "allreduce_epilogue_f32",
                Dtype::Bf16 => "allreduce_epilogue_bf16",
            },
        };
        let epilogue = jit::function(comm.context(), &epilogue_spec)?;
        let (epilogue_cfg, _) = grid_for(comm, &epilogue, &stream, BLOCK, n.div_ceil(vector))?;

        let bias = DeviceBuffer::new(&stream, hidden)?;
        let sets = (0..sets)
            .map(|_| {
                Ok(Set {
                    x: comm.alloc_window::<T>(&stream, n, WindowFlags::COLL_SYMMETRIC)?,
                    y: if two_shot {
                        Some(comm.alloc_window::<T>(&stream, n, WindowFlags::COLL_SYMMETRIC)?)
                    } else {
                        None
                    },
                    residual: DeviceBuffer::new(&stream, n)?,
                    reduced: DeviceBuffer::new(&stream, n)?,
                    out: DeviceBuffer::new(&stream, n)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Run { comm, stream, dev, fused_cfg, epilogue, epilogue_cfg, n, hidden, bias, sets, lamport })
    }
}

impl<T: BenchFloat> Run<'_, T> {
    /// The baseline epilogue's arguments for set `set`: (reduced, bias, residual, out, n, hidden), in the order
    /// allreduce_epilogue_{f32,bf16} take them, as plain addresses.
    fn epilogue_args(&self, set: usize) -> ArgBuffer<'static> {
        let s = &self.sets[set];
        let mut args = ArgBuffer::new();
        args.push(s.reduced.device_address());
        args.push(self.bias.device_address());
        args.push(s.residual.device_address());
        args.push(s.out.device_address());
        args.push(self.n);
        args.push(self.hidden);
        args
    }
}

impl<T: BenchFloat> Instance for Run<'_, T> {
    fn fill(&mut self, set: usize, draw: u64) -> Result<()> {
        let rank = self.comm.rank();
        let s = &mut self.sets[set];
        s.x.buffer_mut().copy_from_host(&random_values::<T>(seed(draw, rank, X), self.n))?;
        // Bias and residual are replicated across tensor-parallel ranks: the same on every rank.
        s.residual.copy_from_host(&random_values::<T>(seed(draw, 0, RESIDUAL), self.n))?;
        // One bias for all sets (it is `hidden` elements, cache-resident either way), refilled with each draw.
        self.bias.copy_from_host(&random_values::<T>(seed(draw, 0, BIAS), self.hidden))
    }

    fn poison(&mut self, set: usize) -> Result<()> {
        let s = &mut self.sets[set];
        poison(&mut s.out)?;
        poison(&mut s.reduced)?;
        if let Some(y) = &mut s.y {
            poison_window(y.buffer_mut())?;
        }
        Ok(())
    }

    fn run_fused(&mut self, set: usize) -> Result<()> {
        let s = &mut self.sets[set];
        if let Some(lamport) = &mut self.lamport {
            return lamport.launch(&self.stream, &self.dev, s.x.buffer(), &self.bias, &s.residual, &mut s.out);
        }
        match &s.y {
            Some(y) => allreduce_bias_residual_two_shot::launch(
                &self.stream,
                self.fused_cfg,
                &self.dev,
                &s.x,
                y,
                &self.bias,
                &s.residual,
                &mut s.out,
                self.n,
                self.hidden,
            ),
            None => allreduce_bias_residual_one_shot::launch(
                &self.stream,
                self.fused_cfg,
                &self.dev,
                &s.x,
                &self.bias,
                &s.residual,
                &mut s.out,
                self.n,
                self.hidden,
            ),
        }
    }

    fn run_unfused(&mut self, set: usize) -> Result<()> {
        let s = &mut self.sets[set];
        self.comm.all_reduce(s.x.buffer(), &mut s.reduced, ReduceOp::Sum, &self.stream)?;
        let mut args = self.epilogue_args(set);
        // SAFETY: `epilogue_args`' arguments are allreduce_epilogue_{f32,bf16}'s; `reduced`, `residual` and `out`
        // hold `n` elements and `bias` `hidden`, all allocated on this stream's device, and all outlive the run (the
        // instance is dropped only after the stream is synchronized, and DeviceBuffer's drop synchronizes too).
        unsafe { launch_raw(&self.epilogue, &self.stream, &self.epilogue_cfg, &mut args) }
    }

    fn record<'g>(&'g self, side: Side, set: usize, capture: &mut Capture<'g>) -> Result<()> {
        let s = &self.sets[set];
        match side {
            Side::Fused => match (&self.lamport, &s.y) {
                (Some(lamport), _) => {
                    lamport.record(capture, &self.dev, s.x.buffer(), &self.bias, &s.residual, &s.out)?
                }
                (None, Some(y)) => allreduce_bias_residual_two_shot::record(
                    capture,
                    self.fused_cfg,
                    &self.dev,
                    &s.x,
                    y,
                    &self.bias,
                    &s.residual,
                    &s.out,
                    self.n,
                    self.hidden,
                )?,
                (None, None) => allreduce_bias_residual_one_shot::record(
                    capture,
                    self.fused_cfg,
                    &self.dev,
                    &s.x,
                    &self.bias,
                    &s.residual,
                    &s.out,
                    self.n,
                    self.hidden,
                )?,
            },
            Side::Unfused => {
                capture.all_reduce(self.comm, s.x.buffer(), &s.reduced, ReduceOp::Sum)?;
                let mut args = self.epilogue_args(set);
                // SAFETY: as in `run_unfused`; the addresses are the set's buffers and the bias, which the graph
                // borrows (through `&'g self`) for its whole life, and `args` holds plain addresses, no guards.
                unsafe { capture.launch_raw(&self.epilogue, &self.epilogue_cfg, &mut args)? };
            }
        }
        Ok(())
    }

    fn outputs(&mut self, set: usize) -> Result<Vec<Vec<f64>>> {
        if let Some(lamport) = &mut self.lamport {
            // A round that timed out waiting for a peer is an error, not a row of wrong numbers.
            lamport.check()?;
        }
        Ok(vec![widen(&self.sets[set].out.copy_to_host()?)])
    }

    fn reference(&self, draw: u64) -> Vec<Vec<f64>> {
        let bias = random_values::<T>(seed(draw, 0, BIAS), self.hidden);
        let mut out: Vec<f64> = random_values::<T>(seed(draw, 0, RESIDUAL), self.n)
            .into_iter()
            .enumerate()
            .map(|(i, residual)| residual.widen() + bias[i % self.hidden].widen())
            .collect();
        for rank in 0..self.comm.nranks() {
            for (acc, x) in out.iter_mut().zip(random_values::<T>(seed(draw, rank, X), self.n)) {
                *acc += x.widen();
            }
        }
        vec![out]
    }
}
