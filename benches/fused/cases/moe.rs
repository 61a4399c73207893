//! Mixture-of-experts dispatch + expert + combine, top-1 routing with variable token counts per peer
//! (`kit/src/kernels/moe.rs`: route, dispatch, stand-in expert, combine over LSA, no host round trip), against
//! the usual route + `ncclAllToAll` of the counts + copy to the host and synchronize + pack + grouped
//! `ncclSend`/`ncclRecv` + expert + grouped send/receive back + unpack (`benches/cuda/moe_dispatch_epilogue.cu`),
//! as `examples/06_moe_dispatch.rs` does.
//!
//! The message size is this rank's tokens (`tokens x hidden` elements). Routing is skewed towards the low experts
//! (4 per rank), so the counts per peer differ. Both sides run the same stand-in expert kernel
//! (`moe_toy_expert`, `y = (expert + 1) · recv`) and write the same outputs: the received rows, their expert ids
//! and count, and the combined output. The baseline's host synchronization in the middle of each run is part of
//! what it costs, and is in its time.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use weft::host::caps::Lsa;
use weft::host::jit::{self, KernelSpec};
use weft::host::{Active, Communicator, DevComm, DeviceBuffer, LaunchConfig, Requirements, Window, WindowFlags};

use crate::harness::{grid_for_rows, random_values, widen, BenchFloat, Case, Instance, Rank, Result};
use crate::kernels::moe::{moe_combine, moe_dispatch, moe_route, moe_toy_expert};
use crate::options::Dtype;
use crate::stats::seed;

/// The baseline's run, the same code as `examples/06_moe_dispatch.rs` runs.
use weft_kit::moe_unfused::{Outputs, Problem, Scratch, UnfusedKernels};

/// The baseline's route, pack and unpack kernels.
const BASELINE: &str = weft_kit::baselines::MOE_DISPATCH_EPILOGUE;
const BASELINE_NAME: &str = "moe_dispatch_epilogue";
const HIDDEN: usize = 4096;
const EXPERTS_PER_RANK: u32 = 4;
/// Threads per block of the per-token kernels, and of the one-block routing kernels (as in the example).
const BLOCK: u32 = 256;
const ROUTE_BLOCK: u32 = 1024;

/// Input streams of a draw (see [`crate::stats::seed`]).
const X: u64 = 0;
const EXPERTS: u64 = 1;
const GATE: u64 = 2;

/// MoE dispatch + expert + combine: fused LSA kernels vs NCCL point-to-point with packing and a host round trip.
#[derive(Debug)]
pub struct Moe;

impl Case for Moe {
    fn name(&self) -> &'static str {
        "moe_dispatch_combine"
    }

    fn fused(&self) -> &'static str {
        "moe_route + moe_dispatch + moe_toy_expert + moe_combine (kit/src/kernels/moe.rs)"
    }

    fn baseline(&self) -> &'static str {
        "moe_route_counts + ncclAllToAll(counts) + host sync + moe_pack + ncclSend/Recv + moe_toy_expert + \
         ncclSend/Recv + moe_unpack (benches/cuda/moe_dispatch_epilogue.cu)"
    }

    fn bytes_moved(&self, _dtype: Dtype, bytes: usize, _nranks: usize) -> u64 {
        // With every rank receiving as many tokens as it sends (exact on one rank): dispatch reads each token
        // where it lives and writes it where it goes, the expert reads and writes each received token, combine
        // reads each result where it was computed and writes it home. Ids, counts and gates are negligible.
        6 * bytes as u64
    }

    fn cuda_sources(&self) -> &'static [(&'static str, &'static str)] {
        &[(BASELINE_NAME, BASELINE)]
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

/// Rank `rank`'s routing for a draw: a top-1 expert per token, skewed towards the low experts, and a gate.
fn routing(draw: u64, rank: usize, nranks: usize, tokens: usize) -> (Vec<u32>, Vec<f32>) {
    let experts_total = EXPERTS_PER_RANK as usize * nranks;
    let experts = random_values::<f32>(seed(draw, rank, EXPERTS), tokens)
        .into_iter()
        .map(|v| {
            let u = f64::from(v + 1.0) / 2.0;
            ((u * u * experts_total as f64) as usize).min(experts_total - 1) as u32
        })
        .collect();
    let gate = random_values::<f32>(seed(draw, rank, GATE), tokens).into_iter().map(|v| 0.55 + 0.45 * v).collect();
    (experts, gate)
}

/// The kernels of both sides, loaded once per instance.
struct Kernels {
    /// Fused dispatch, expert (both sides), fused combine.
    dispatch_cfg: LaunchConfig,
    expert_cfg: LaunchConfig,
    combine_cfg: LaunchConfig,
    baseline: UnfusedKernels,
}

/// One input/output set. The outputs (`recv`, `recv_expert`, `recv_total`, `out`) are shared by both sides.
struct Set<'comm, T: BenchFloat> {
    x: Window<'comm, T>,
    experts: Window<'comm, u32>,
    gate: DeviceBuffer<f32>,
    // Fused: windows the peers read, and the token positions.
    order: Window<'comm, u32>,
    meta: Window<'comm, u32>,
    y: Window<'comm, T>,
    position: CudaSlice<u32>,
    // Baseline.
    scratch: Scratch<T>,
    // Both.
    recv: CudaSlice<T>,
    recv_expert: CudaSlice<u32>,
    recv_total: CudaSlice<u32>,
    out: CudaSlice<T>,
}

struct Run<'comm, T: BenchFloat> {
    comm: &'comm Communicator<Active>,
    stream: Arc<CudaStream>,
    dev: DevComm<'comm, Lsa>,
    kernels: Kernels,
    tokens: usize,
    hidden: usize,
    capacity: usize,
    sets: Vec<Set<'comm, T>>,
}

impl<'comm, T: BenchFloat> Run<'comm, T> {
    fn new(rank: &Rank<'comm>, bytes: usize, sets: usize) -> Result<Run<'comm, T>> {
        let (comm, stream) = (rank.comm, rank.stream.clone());
        let nranks = comm.nranks();
        let n = (bytes / std::mem::size_of::<T>()).max(1);
        let hidden = HIDDEN.min(n);
        let tokens = n / hidden;
        // Every token could go to one rank: room for all of them, so none is dropped.
        let capacity = nranks * tokens;
        // One block per token (blocks loop). Grids are the same on every rank (LSA barrier `b` pairs block `b` of
        // every rank): sized by `capacity` and `tokens`, which every rank shares, never by what a rank happens to
        // receive.
        let (dispatch_cfg, dispatch_wave) =
            grid_for_rows(comm, &moe_dispatch::function::<T>(comm.context())?, &stream, BLOCK, capacity)?;
        let (expert_cfg, _) =
            grid_for_rows(comm, &moe_toy_expert::function::<T>(comm.context())?, &stream, BLOCK, capacity)?;
        let (combine_cfg, combine_wave) =
            grid_for_rows(comm, &moe_combine::function::<T>(comm.context())?, &stream, BLOCK, tokens)?;
        let requirements: Requirements = moe_route::requirements(&LaunchConfig::linear(1, ROUTE_BLOCK))
            .merge(&moe_dispatch::requirements(&dispatch_wave))
            .merge(&moe_combine::requirements(&combine_wave));
        // Loaded before dev_comm's line-up, like the three above (docs/multi-rank.md, "Load before launch").
        moe_route::function(comm.context())?;
        let dev = comm.dev_comm(&requirements)?;

        let baseline = |entry_point| {
            jit::function(comm.context(), &KernelSpec { name: BASELINE_NAME, source: BASELINE, entry_point })
        };
        let (pack_name, unpack_name) = match T::DTYPE {
            Dtype::F32 => ("moe_pack_f32", "moe_unpack_f32"),
            Dtype::Bf16 => ("moe_pack_bf16", "moe_unpack_bf16"),
        };
        let pack = baseline(pack_name)?;
        let (pack_cfg, _) = grid_for_rows(comm, &pack, &stream, BLOCK, tokens)?;
        let kernels = Kernels {
            dispatch_cfg,
            expert_cfg,
            combine_cfg,
            baseline: UnfusedKernels {
                route_counts: baseline("moe_route_counts")?,
                route_block: ROUTE_BLOCK,
                pack,
                unpack: baseline(unpack_name)?,
                pack_cfg,
                expert_cfg,
            },
        };
        let problem = Problem { tokens, hidden, experts_per_rank: EXPERTS_PER_RANK };

        let window = |len| comm.alloc_window::<T>(&stream, len, WindowFlags::COLL_SYMMETRIC);
        let ids = |len| comm.alloc_window::<u32>(&stream, len, WindowFlags::COLL_SYMMETRIC);
        let sets = (0..sets)
            .map(|_| {
                Ok(Set {
                    x: window(tokens * hidden)?,
                    experts: ids(tokens)?,
                    gate: DeviceBuffer::new(&stream, tokens)?,
                    order: ids(tokens)?,
                    meta: ids(2 * nranks)?,
                    y: window(capacity * hidden)?,
                    position: stream.alloc_zeros(tokens)?,
                    scratch: Scratch::new(&stream, nranks, problem, capacity)?,
                    recv: stream.alloc_zeros(capacity * hidden)?,
                    recv_expert: stream.alloc_zeros(capacity)?,
                    recv_total: stream.alloc_zeros(1)?,
                    out: stream.alloc_zeros(tokens * hidden)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Run { comm, stream, dev, kernels, tokens, hidden, capacity, sets })
    }
}

impl<T: BenchFloat> Instance for Run<'_, T> {
    fn fill(&mut self, set: usize, draw: u64) -> Result<()> {
        let (rank, nranks) = (self.comm.rank(), self.comm.nranks());
        let (experts, gate) = routing(draw, rank, nranks, self.tokens);
        let s = &mut self.sets[set];
        s.x.buffer_mut().copy_from_host(&random_values::<T>(seed(draw, rank, X), self.tokens * self.hidden))?;
        s.experts.buffer_mut().copy_from_host(&experts)?;
        s.gate.copy_from_host(&gate)
    }

    fn poison(&mut self, set: usize) -> Result<()> {
        let nan = T::round_from(f32::NAN);
        let (stream, s) = (&self.stream, &mut self.sets[set]);
        s.y.buffer_mut().copy_from_host(&vec![nan; self.capacity * self.hidden])?;
        stream.memcpy_htod(&vec![nan; self.capacity * self.hidden], &mut s.recv)?;
        stream.memcpy_htod(&vec![u32::MAX; self.capacity], &mut s.recv_expert)?;
        stream.memcpy_htod(&[u32::MAX], &mut s.recv_total)?;
        stream.memcpy_htod(&vec![nan; self.tokens * self.hidden], &mut s.out)?;
        weft::host::cuda::settle(stream)?;
        Ok(())
    }

    fn run_fused(&mut self, set: usize) -> Result<()> {
        let (stream, dev, k, s) = (&self.stream, &self.dev, &self.kernels, &mut self.sets[set]);
        let (tokens, hidden) = (self.tokens, self.hidden);
        moe_route::launch(
            stream,
            LaunchConfig::linear(1, ROUTE_BLOCK),
            dev,
            &s.experts,
            &s.order,
            &s.meta,
            &mut s.position,
            tokens,
            EXPERTS_PER_RANK,
        )?;
        moe_dispatch::launch(
            stream,
            k.dispatch_cfg,
            dev,
            &s.x,
            &s.experts,
            &s.order,
            &s.meta,
            &mut s.recv,
            &mut s.recv_expert,
            &mut s.recv_total,
            hidden,
            self.capacity,
        )?;
        moe_toy_expert::launch(
            stream,
            k.expert_cfg,
            &s.recv,
            &s.recv_expert,
            &s.recv_total,
            &mut s.y.buffer_mut(),
            hidden,
        )?;
        moe_combine::launch(
            stream,
            k.combine_cfg,
            dev,
            &s.y,
            &s.meta,
            s.experts.buffer(),
            &s.position,
            &s.gate,
            &mut s.out,
            tokens,
            hidden,
            EXPERTS_PER_RANK,
        )
    }

    fn run_unfused(&mut self, set: usize) -> Result<()> {
        let (stream, s) = (&self.stream, &mut self.sets[set]);
        let problem = Problem { tokens: self.tokens, hidden: self.hidden, experts_per_rank: EXPERTS_PER_RANK };
        let outputs = Outputs {
            recv: &mut s.recv,
            recv_expert: &mut s.recv_expert,
            recv_total: &mut s.recv_total,
            out: &mut s.out,
        };
        weft_kit::moe_unfused::run(
            self.comm,
            stream,
            &self.kernels.baseline,
            problem,
            &mut s.scratch,
            outputs,
            &s.x,
            &s.experts,
            &s.gate,
        )
    }

    fn outputs(&mut self, set: usize) -> Result<Vec<Vec<f64>>> {
        let (stream, s) = (&self.stream, &self.sets[set]);
        let total = (weft::host::cuda::download(stream, &s.recv_total)?[0] as usize).min(self.capacity);
        let ids = weft::host::cuda::download(stream, &s.recv_expert)?;
        let recv = weft::host::cuda::download(stream, &s.recv)?;
        Ok(vec![
            vec![total as f64],
            ids[..total].iter().map(|&id| f64::from(id)).collect(),
            widen(&recv[..total * self.hidden]),
            widen(&weft::host::cuda::download(stream, &s.out)?),
        ])
    }

    fn reference(&self, draw: u64) -> Vec<Vec<f64>> {
        let (me, nranks, tokens, hidden) = (self.comm.rank(), self.comm.nranks(), self.tokens, self.hidden);
        let (mut recv, mut recv_expert, mut out) = (Vec::new(), Vec::new(), Vec::new());
        for source in 0..nranks {
            let (experts, gate) = routing(draw, source, nranks, tokens);
            let x = widen(&random_values::<T>(seed(draw, source, X), tokens * hidden));
            for (t, &expert) in experts.iter().enumerate() {
                if (expert / EXPERTS_PER_RANK) as usize == me {
                    recv.extend_from_slice(&x[t * hidden..(t + 1) * hidden]);
                    recv_expert.push(f64::from(expert));
                }
            }
            if source == me {
                for (t, &expert) in experts.iter().enumerate() {
                    let scale = f64::from(gate[t]) * f64::from(expert + 1);
                    out.extend(x[t * hidden..(t + 1) * hidden].iter().map(|v| v * scale));
                }
            }
        }
        vec![vec![recv_expert.len() as f64], recv_expert, recv, out]
    }
}
