//! Tensor-parallel residual add + RMSNorm fused with the reduce-scatter before it and the all-gather after it
//! (`kit/src/kernels/rmsnorm.rs`), against `ncclReduceScatter`, the hand-written epilogue of
//! `benches/cuda/rmsnorm_epilogue.cu` and `ncclAllGather`:
//!
//! ```text
//! h            = Σ_ranks x[my rows] + residual        residual_out = h      (this rank's rows/R rows)
//! out          = every rank's h / sqrt(mean(h²) + eps) · weight               (all rows, on every rank)
//! ```
//!
//! Both sides write the same buffers: `out` is a symmetric window (the fused kernel stores into every peer's),
//! and the baseline's all-gather lands in that window's memory too.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream};
use weft::host::caps::Lsa;
use weft::host::jit::{self, KernelSpec};
use weft::host::launch::{launch_raw, ArgBuffer};
use weft::host::{Active, Communicator, DevComm, DeviceBuffer, LaunchConfig, ReduceOp, Window, WindowFlags};

use crate::harness::{
    grid_for_rows, poison, poison_window, random_values, widen, BenchFloat, Case, Instance, Rank, Result,
};
use crate::kernels::rmsnorm::rmsnorm_residual_tp;
use crate::options::Dtype;
use crate::stats::seed;

/// The baseline's epilogue kernel.
const EPILOGUE: &str = weft_kit::baselines::RMSNORM_EPILOGUE;
const EPILOGUE_NAME: &str = "rmsnorm_epilogue";
/// The hidden dimension (columns): a typical transformer width, narrower when the message has fewer rows than
/// ranks otherwise.
const HIDDEN: usize = 4096;
/// Threads per block for both kernels (one block per row; a multiple of 32), as in `examples/04_rmsnorm.rs`.
const BLOCK: u32 = 256;
const EPS: f32 = 1e-5;

/// Input streams of a draw (see [`crate::stats::seed`]).
const X: u64 = 0;
const RESIDUAL: u64 = 1;
const WEIGHT: u64 = 2;

/// `(rows, hidden)` for about `n` elements per rank on `nranks` ranks: `rows` a multiple of `nranks` (each rank
/// owns `rows / nranks` of them), `rows · hidden ≤ n`.
fn shape(n: usize, nranks: usize) -> (usize, usize) {
    let nranks = nranks.max(1);
    let hidden = HIDDEN.min(n / nranks).max(1);
    let rows = ((n / hidden) / nranks * nranks).max(nranks);
    (rows, hidden)
}

/// Residual add + reduce-scatter + RMSNorm + all-gather, fused vs NCCL + epilogue kernel + NCCL.
#[derive(Debug)]
pub struct RmsNorm;

impl Case for RmsNorm {
    fn name(&self) -> &'static str {
        "rmsnorm"
    }

    fn fused(&self) -> &'static str {
        "rmsnorm_residual_tp (kit/src/kernels/rmsnorm.rs): residual + reduce-scatter + RMSNorm + all-gather"
    }

    fn baseline(&self) -> &'static str {
        "ncclReduceScatter + rmsnorm_epilogue kernel (benches/cuda/rmsnorm_epilogue.cu) + ncclAllGather"
    }

    fn bytes_moved(&self, _dtype: Dtype, bytes: usize, nranks: usize) -> u64 {
        let (n, shard) = (bytes as u64, (bytes / nranks.max(1)) as u64);
        // x: each element read once (this rank's rows by itself, the others by their owners); residual read and
        // residual_out written for this rank's rows; out: every row written once, by its owner.
        n + shard + shard + n
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
    /// This rank's partial activations, all rows.
    x: Window<'comm, T>,
    /// This rank's rows of the residual stream, and the updated residual.
    residual: DeviceBuffer<T>,
    residual_out: DeviceBuffer<T>,
    /// The normalized rows of every rank.
    out: Window<'comm, T>,
    /// The baseline's intermediates: the reduce-scatter's result and this rank's normalized rows.
    reduced: DeviceBuffer<T>,
    normed: DeviceBuffer<T>,
}

struct Run<'comm, T: BenchFloat> {
    comm: &'comm Communicator<Active>,
    stream: Arc<CudaStream>,
    dev: DevComm<'comm, Lsa>,
    fused_cfg: LaunchConfig,
    epilogue: CudaFunction,
    epilogue_cfg: LaunchConfig,
    rows: usize,
    hidden: usize,
    weight: DeviceBuffer<T>,
    sets: Vec<Set<'comm, T>>,
}

impl<'comm, T: BenchFloat> Run<'comm, T> {
    fn new(rank: &Rank<'comm>, bytes: usize, sets: usize) -> Result<Run<'comm, T>> {
        let (comm, stream) = (rank.comm, rank.stream.clone());
        let (rows, hidden) = shape((bytes / std::mem::size_of::<T>()).max(1), comm.nranks());
        let my_rows = rows / comm.nranks();
        // One block per row, at most one full wave (blocks loop over the rows).
        let fused = rmsnorm_residual_tp::function::<T>(comm.context())?;
        let (fused_cfg, wave) = grid_for_rows(comm, &fused, &stream, BLOCK, my_rows)?;
        let dev = comm.dev_comm(&rmsnorm_residual_tp::requirements(&wave))?;
        let epilogue_spec = KernelSpec {
            name: EPILOGUE_NAME,
            source: EPILOGUE,
            entry_point: match T::DTYPE {
                Dtype::F32 => "rmsnorm_epilogue_f32",
                Dtype::Bf16 => "rmsnorm_epilogue_bf16",
            },
        };
        let epilogue = jit::function(comm.context(), &epilogue_spec)?;
        let (epilogue_cfg, _) = grid_for_rows(comm, &epilogue, &stream, BLOCK, my_rows)?;

        let (n, shard) = (rows * hidden, my_rows * hidden);
        let weight = DeviceBuffer::new(&stream, hidden)?;
        let sets = (0..sets)
            .map(|_| {
                Ok(Set {
                    x: comm.alloc_window::<T>(&stream, n, WindowFlags::COLL_SYMMETRIC)?,
                    residual: DeviceBuffer::new(&stream, shard)?,
                    residual_out: DeviceBuffer::new(&stream, shard)?,
                    out: comm.alloc_window::<T>(&stream, n, WindowFlags::COLL_SYMMETRIC)?,
                    reduced: DeviceBuffer::new(&stream, shard)?,
                    normed: DeviceBuffer::new(&stream, shard)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Run { comm, stream, dev, fused_cfg, epilogue, epilogue_cfg, rows, hidden, weight, sets })
    }

    fn shard(&self) -> usize {
        self.rows / self.comm.nranks() * self.hidden
    }
}

impl<T: BenchFloat> Instance for Run<'_, T> {
    fn fill(&mut self, set: usize, draw: u64) -> Result<()> {
        let (rank, n, shard) = (self.comm.rank(), self.rows * self.hidden, self.shard());
        let s = &mut self.sets[set];
        s.x.buffer_mut().copy_from_host(&random_values::<T>(seed(draw, rank, X), n))?;
        s.residual.copy_from_host(&random_values::<T>(seed(draw, rank, RESIDUAL), shard))?;
        // One weight for all sets (`hidden` elements, cache-resident either way), the same on every rank.
        self.weight.copy_from_host(&random_values::<T>(seed(draw, 0, WEIGHT), self.hidden))
    }

    fn poison(&mut self, set: usize) -> Result<()> {
        let s = &mut self.sets[set];
        poison_window(s.out.buffer_mut())?;
        poison(&mut s.residual_out)?;
        poison(&mut s.reduced)?;
        poison(&mut s.normed)
    }

    fn run_fused(&mut self, set: usize) -> Result<()> {
        let s = &mut self.sets[set];
        rmsnorm_residual_tp::launch(
            &self.stream,
            self.fused_cfg,
            &self.dev,
            &s.x,
            &s.residual,
            &self.weight,
            &mut s.residual_out,
            &s.out,
            self.rows,
            self.hidden,
            EPS,
        )
    }

    fn run_unfused(&mut self, set: usize) -> Result<()> {
        let my_rows = self.rows / self.comm.nranks();
        let s = &mut self.sets[set];
        self.comm.reduce_scatter(s.x.buffer(), &mut s.reduced, ReduceOp::Sum, &self.stream)?;
        let mut args = ArgBuffer::new();
        args.push(s.reduced.device_address());
        args.push(s.residual.device_address());
        args.push(self.weight.device_address());
        args.push(s.residual_out.device_address());
        args.push(s.normed.device_address());
        args.push(my_rows);
        args.push(self.hidden);
        args.push(EPS);
        // SAFETY: rmsnorm_epilogue_{f32,bf16} take (const T* reduced, const T* residual, const T* weight,
        // T* residual_out, T* normed, size_t rows, size_t hidden, float eps), pushed above in order; the four
        // matrices hold `my_rows x hidden` elements of the T the entry point was chosen for and `weight` holds
        // `hidden`, all on this stream's device, and all outlive the run (the instance is dropped only after the
        // stream is synchronized, and DeviceBuffer's drop synchronizes too).
        unsafe { launch_raw(&self.epilogue, &self.stream, &self.epilogue_cfg, &mut args)? };
        self.comm.all_gather(&s.normed, &mut s.out.buffer_mut(), &self.stream)
    }

    fn outputs(&mut self, set: usize) -> Result<Vec<Vec<f64>>> {
        let s = &self.sets[set];
        Ok(vec![widen(&s.out.buffer().copy_to_host()?), widen(&s.residual_out.copy_to_host()?)])
    }

    fn reference(&self, draw: u64) -> Vec<Vec<f64>> {
        let (nranks, hidden) = (self.comm.nranks(), self.hidden);
        let (n, shard) = (self.rows * hidden, self.shard());
        // h for every row: the sum of every rank's x, plus the residual of the rank owning the row.
        let mut h = vec![0.0; n];
        for rank in 0..nranks {
            for (acc, x) in h.iter_mut().zip(random_values::<T>(seed(draw, rank, X), n)) {
                *acc += x.widen();
            }
            let rows = &mut h[rank * shard..(rank + 1) * shard];
            for (acc, r) in rows.iter_mut().zip(random_values::<T>(seed(draw, rank, RESIDUAL), shard)) {
                *acc += r.widen();
            }
        }
        let weight = widen(&random_values::<T>(seed(draw, 0, WEIGHT), hidden));
        let mut out = vec![0.0; n];
        for (h_row, out_row) in h.chunks(hidden).zip(out.chunks_mut(hidden)) {
            let mean_square = h_row.iter().map(|v| v * v).sum::<f64>() / hidden as f64;
            let scale = 1.0 / (mean_square + f64::from(EPS)).sqrt();
            for ((o, v), w) in out_row.iter_mut().zip(h_row).zip(&weight) {
                *o = v * scale * w;
            }
        }
        let me = self.comm.rank();
        vec![out, h[me * shard..(me + 1) * shard].to_vec()]
    }
}
