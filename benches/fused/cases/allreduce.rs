//! The quickstart's one-shot LSA all-reduce (`kit/src/kernels/allreduce.rs`) against `ncclAllReduce`.
//!
//! Nothing is fused here: this is the plain all-reduce every fused case builds on, and the check that the
//! harness measures a weft kernel and an NCCL collective the same way. With one rank NCCL's all-reduce is a
//! device-to-device copy on its own tuned path.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use weft::host::caps::Lsa;

use weft::host::{Active, Capture, Communicator, DevComm, DeviceBuffer, LaunchConfig, ReduceOp, Window, WindowFlags};

use crate::harness::{grid_for, poison, random_values, widen, BenchFloat, Case, Instance, Rank, Result, Side};
use crate::kernels::allreduce::lsa_allreduce;
use crate::options::Dtype;
use crate::stats::seed;

const BLOCK: u32 = 512;

/// `out = Σ_ranks x`: weft's `lsa_allreduce` vs `ncclAllReduce`.
#[derive(Debug)]
pub struct AllReduce;

impl Case for AllReduce {
    fn name(&self) -> &'static str {
        "allreduce"
    }

    fn fused(&self) -> &'static str {
        "lsa_allreduce (kit/src/kernels/allreduce.rs): one-shot all-reduce over LSA"
    }

    fn not_capturable(&self) -> Option<&'static str> {
        None
    }

    fn baseline(&self) -> &'static str {
        "ncclAllReduce (no epilogue)"
    }

    fn bytes_moved(&self, _dtype: Dtype, bytes: usize, nranks: usize) -> u64 {
        // This rank's input is read once by itself and once by each peer; the output is written once.
        (nranks as u64 + 1) * bytes as u64
    }

    fn bus_factor(&self, nranks: usize) -> Option<f64> {
        (nranks > 1).then(|| 2.0 * (nranks - 1) as f64 / nranks as f64)
    }

    fn setup<'comm>(
        &self,
        rank: &Rank<'comm>,
        dtype: Dtype,
        bytes: usize,
        sets: usize,
    ) -> Result<Box<dyn Instance + 'comm>> {
        Ok(match dtype {
            Dtype::F32 => Box::new(AllReduceRun::<f32>::new(rank, bytes, sets)?),
            Dtype::Bf16 => Box::new(AllReduceRun::<half::bf16>::new(rank, bytes, sets)?),
        })
    }
}

struct AllReduceRun<'comm, T: BenchFloat> {
    comm: &'comm Communicator<Active>,
    stream: Arc<CudaStream>,
    dev: DevComm<'comm, Lsa>,
    cfg: LaunchConfig,
    n: usize,
    inputs: Vec<Window<'comm, T>>,
    outputs: Vec<DeviceBuffer<T>>,
}

impl<'comm, T: BenchFloat> AllReduceRun<'comm, T> {
    fn new(rank: &Rank<'comm>, bytes: usize, sets: usize) -> Result<AllReduceRun<'comm, T>> {
        let (comm, stream) = (rank.comm, rank.stream.clone());
        let n = (bytes / std::mem::size_of::<T>()).max(1);
        let (cfg, wave) = grid_for(comm, &lsa_allreduce::function::<T>(comm.context())?, &stream, BLOCK, n)?;
        let dev = comm.dev_comm(&lsa_allreduce::requirements(&wave))?;
        let inputs = (0..sets)
            .map(|_| comm.alloc_window::<T>(&stream, n, WindowFlags::COLL_SYMMETRIC))
            .collect::<Result<Vec<_>>>()?;
        let outputs = (0..sets).map(|_| DeviceBuffer::new(&stream, n)).collect::<Result<Vec<_>>>()?;
        Ok(AllReduceRun { comm, stream, dev, cfg, n, inputs, outputs })
    }
}

impl<T: BenchFloat> Instance for AllReduceRun<'_, T> {
    fn fill(&mut self, set: usize, draw: u64) -> Result<()> {
        let x = random_values::<T>(seed(draw, self.comm.rank(), 0), self.n);
        self.inputs[set].buffer_mut().copy_from_host(&x)
    }

    fn poison(&mut self, set: usize) -> Result<()> {
        poison(&mut self.outputs[set])
    }

    fn record<'g>(&'g self, side: Side, set: usize, capture: &mut Capture<'g>) -> Result<()> {
        match side {
            Side::Fused => {
                lsa_allreduce::record(capture, self.cfg, &self.dev, &self.inputs[set], &self.outputs[set], self.n)?
            }
            Side::Unfused => {
                capture.all_reduce(self.comm, self.inputs[set].buffer(), &self.outputs[set], ReduceOp::Sum)?
            }
        }
        Ok(())
    }

    fn run_fused(&mut self, set: usize) -> Result<()> {
        lsa_allreduce::launch(&self.stream, self.cfg, &self.dev, &self.inputs[set], &mut self.outputs[set], self.n)
    }

    fn run_unfused(&mut self, set: usize) -> Result<()> {
        self.comm.all_reduce(self.inputs[set].buffer(), &mut self.outputs[set], ReduceOp::Sum, &self.stream)
    }

    fn outputs(&mut self, set: usize) -> Result<Vec<Vec<f64>>> {
        Ok(vec![widen(&self.outputs[set].copy_to_host()?)])
    }

    fn reference(&self, draw: u64) -> Vec<Vec<f64>> {
        let mut sum = vec![0.0; self.n];
        for rank in 0..self.comm.nranks() {
            for (acc, x) in sum.iter_mut().zip(random_values::<T>(seed(draw, rank, 0), self.n)) {
                *acc += x.widen();
            }
        }
        vec![sum]
    }
}
