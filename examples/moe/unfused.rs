//! The unfused baseline of `06_moe_dispatch.rs`: the kernels of `benches/cuda/moe_dispatch_epilogue.cu` around
//! NCCL's variable-size all-to-all (an `ncclAllToAll` of the counts, a host round trip for the sizes, grouped
//! `ncclSend`/`ncclRecv`), with its buffers. Part of the example, in a file of its own for length; the run itself
//! is `weft_kit::moe_unfused` (kit/src/moe_unfused.rs), which the fused benchmark's MoE case runs too.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream};
use weft::host::{Communicator, Error, LaunchConfig, Window};

use super::{check, Reference, EXPERTS_PER_RANK, ROUTE_BLOCK};
use weft_kit::common::{self, Real};

use weft_kit::moe_unfused::{Outputs, Problem, Scratch, UnfusedKernels};

/// The hand-written kernels.
pub(super) const BASELINE: &str = weft_kit::baselines::MOE_DISPATCH_EPILOGUE;

/// The baseline's kernels, one set per element type where they differ.
pub(super) struct BaselineKernels {
    route: CudaFunction,
    pack: [CudaFunction; 2],
    unpack: [CudaFunction; 2],
}

impl BaselineKernels {
    /// Compiles (or finds in the cache) and loads the baseline's kernels into `ctx`.
    pub(super) fn load(ctx: &Arc<CudaContext>) -> std::result::Result<Self, Error> {
        let module = common::Baseline::load(ctx, "moe_dispatch_epilogue", BASELINE)?;
        Ok(BaselineKernels {
            route: module.function("moe_route_counts")?,
            pack: [module.function("moe_pack_f32")?, module.function("moe_pack_bf16")?],
            unpack: [module.function("moe_unpack_f32")?, module.function("moe_unpack_bf16")?],
        })
    }

    /// One full wave of `block`-thread blocks for pack and unpack, per type (f32, bf16), on this rank's share of its
    /// GPU.
    pub(super) fn waves(
        &self,
        comm: &Communicator,
        stream: &Arc<CudaStream>,
        block: u32,
    ) -> std::result::Result<[LaunchConfig; 2], Error> {
        Ok([comm.one_wave(&self.pack[0], stream, block)?, comm.one_wave(&self.pack[1], stream, block)?])
    }
}

/// The unfused baseline's kernels and buffers for one element type (the run itself: `weft_kit::moe_unfused` (kit/src/moe_unfused.rs), shared with
/// the fused benchmark).
pub(super) struct Unfused<'a, T: Real> {
    comm: &'a Communicator,
    stream: &'a Arc<CudaStream>,
    kernels: UnfusedKernels,
    problem: Problem,
    scratch: Scratch<T>,
    recv: CudaSlice<T>,
    recv_expert: CudaSlice<u32>,
    recv_total: CudaSlice<u32>,
    out: CudaSlice<T>,
}

impl<'a, T: Real> Unfused<'a, T> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        comm: &'a Communicator,
        stream: &'a Arc<CudaStream>,
        kernels: &BaselineKernels,
        which: usize,
        cfg: LaunchConfig,
        expert_cfg: LaunchConfig,
        capacity: usize,
        tokens: usize,
        hidden: usize,
    ) -> std::result::Result<Self, Error> {
        let problem = Problem { tokens, hidden, experts_per_rank: EXPERTS_PER_RANK };
        let poison = |len: usize| stream.clone_htod(&vec![T::nan(); len]);
        Ok(Unfused {
            comm,
            stream,
            kernels: UnfusedKernels {
                route_counts: kernels.route.clone(),
                route_block: ROUTE_BLOCK,
                pack: kernels.pack[which].clone(),
                unpack: kernels.unpack[which].clone(),
                pack_cfg: cfg,
                expert_cfg,
            },
            problem,
            scratch: Scratch::new(stream, comm.nranks(), problem, capacity)?,
            recv: poison(capacity * hidden)?,
            recv_expert: stream.clone_htod(&vec![u32::MAX; capacity])?,
            recv_total: stream.clone_htod(&[u32::MAX])?,
            out: poison(tokens * hidden)?,
        })
    }

    /// Route, count exchange, host synchronisation, pack, send/receive, expert, send/receive back, unpack.
    pub(super) fn run(
        &mut self,
        x: &Window<'_, T>,
        experts: &Window<'_, u32>,
        gate: &CudaSlice<f32>,
    ) -> std::result::Result<(), Error> {
        let outputs = Outputs {
            recv: &mut self.recv,
            recv_expert: &mut self.recv_expert,
            recv_total: &mut self.recv_total,
            out: &mut self.out,
        };
        weft_kit::moe_unfused::run(
            self.comm,
            self.stream,
            &self.kernels,
            self.problem,
            &mut self.scratch,
            outputs,
            x,
            experts,
            gate,
        )
    }

    pub(super) fn errors(&self, stream: &Arc<CudaStream>, want: &Reference) -> std::result::Result<(f64, f64), Error> {
        check(stream, want, self.problem.hidden, &self.recv, &self.recv_expert, &self.recv_total, &self.out)
    }
}
