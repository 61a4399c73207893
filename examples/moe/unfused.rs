//! The unfused baseline of `06_moe_dispatch.rs`: the kernels of `benches/cuda/moe_dispatch_epilogue.cu` around
//! NCCL's variable-size all-to-all (an `ncclAllToAll` of the counts, a host round trip for the sizes, grouped
//! `ncclSend`/`ncclRecv`), with its buffers. Part of the example, in a file of its own for length.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream};
use weft::host::launch::{launch_raw, ArgBuffer};
use weft::host::{Communicator, Error, LaunchConfig, Window};

use super::common::{self, Real};
use super::kernels::moe::moe_toy_expert;
use super::{check, Reference, EXPERTS_PER_RANK, ROUTE_BLOCK};

/// The hand-written kernels.
pub(super) const BASELINE: &str = include_str!("../../benches/cuda/moe_dispatch_epilogue.cu");

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

    /// One full wave of `block`-thread blocks for pack and unpack, per type (f32, bf16).
    pub(super) fn waves(&self, stream: &Arc<CudaStream>, block: u32) -> std::result::Result<[LaunchConfig; 2], Error> {
        Ok([
            LaunchConfig::one_wave(&self.pack[0], stream, block)?,
            LaunchConfig::one_wave(&self.pack[1], stream, block)?,
        ])
    }
}

/// The unfused baseline's kernels and buffers.
pub(super) struct Unfused<'a, T: Real> {
    comm: &'a Communicator,
    stream: &'a Arc<CudaStream>,
    kernels: &'a BaselineKernels,
    which: usize,
    cfg: LaunchConfig,
    expert_cfg: LaunchConfig,
    counts: CudaSlice<u32>,
    offsets: CudaSlice<u32>,
    slot: CudaSlice<u32>,
    recv_counts: CudaSlice<u32>,
    send: CudaSlice<T>,
    send_expert: CudaSlice<u32>,
    recv: CudaSlice<T>,
    recv_expert: CudaSlice<u32>,
    recv_total: CudaSlice<u32>,
    y: CudaSlice<T>,
    back: CudaSlice<T>,
    out: CudaSlice<T>,
    tokens: usize,
    hidden: usize,
}

impl<'a, T: Real> Unfused<'a, T> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        comm: &'a Communicator,
        stream: &'a Arc<CudaStream>,
        kernels: &'a BaselineKernels,
        which: usize,
        cfg: LaunchConfig,
        expert_cfg: LaunchConfig,
        capacity: usize,
        tokens: usize,
        hidden: usize,
    ) -> std::result::Result<Self, Error> {
        let nranks = comm.nranks();
        let poison = |len: usize| stream.clone_htod(&vec![T::nan(); len]);
        Ok(Unfused {
            comm,
            stream,
            kernels,
            which,
            cfg,
            expert_cfg,
            counts: stream.alloc_zeros(nranks)?,
            offsets: stream.alloc_zeros(nranks)?,
            slot: stream.alloc_zeros(tokens)?,
            recv_counts: stream.alloc_zeros(nranks)?,
            send: poison(tokens * hidden)?,
            send_expert: stream.alloc_zeros(tokens)?,
            recv: poison(capacity * hidden)?,
            recv_expert: stream.clone_htod(&vec![u32::MAX; capacity])?,
            recv_total: stream.clone_htod(&[u32::MAX])?,
            y: poison(capacity * hidden)?,
            back: poison(tokens * hidden)?,
            out: poison(tokens * hidden)?,
            tokens,
            hidden,
        })
    }

    /// Route, count exchange, host synchronisation, pack, send/receive, expert, send/receive back, unpack.
    pub(super) fn run(
        &mut self,
        x: &Window<'_, T>,
        experts: &Window<'_, u32>,
        gate: &CudaSlice<f32>,
    ) -> std::result::Result<(), Error> {
        let (comm, stream, hidden, tokens) = (self.comm, self.stream, self.hidden, self.tokens);
        let nranks = comm.nranks();
        {
            let mut args = ArgBuffer::new();
            let pointers = [
                args.slice_arg(experts.buffer(), stream)?.ptr,
                args.slice_arg_mut(&mut self.counts, stream)?.ptr,
                args.slice_arg_mut(&mut self.offsets, stream)?.ptr,
                args.slice_arg_mut(&mut self.slot, stream)?.ptr,
            ];
            pointers.into_iter().for_each(|p| args.push(p));
            args.push(tokens);
            args.push(EXPERTS_PER_RANK);
            args.push(nranks as u32);
            // SAFETY: moe_route_counts(const uint32_t* experts, uint32_t* counts, uint32_t* offsets, uint32_t* slot,
            // size_t tokens, uint32_t experts_per_rank, uint32_t nranks): experts and slot hold `tokens` entries,
            // counts and offsets `nranks`; `args` borrows every buffer until after the launch.
            unsafe { launch_raw(&self.kernels.route, stream, &LaunchConfig::linear(1, ROUTE_BLOCK), &mut args)? };
        }
        comm.all_to_all(&self.counts, &mut self.recv_counts, stream)?;
        // NCCL's point-to-point sizes are host values: the round trip the fused path does not have.
        let counts = stream.clone_dtoh(&self.counts)?;
        let offsets = stream.clone_dtoh(&self.offsets)?;
        let recv_counts = stream.clone_dtoh(&self.recv_counts)?;
        let recv_offsets: Vec<usize> =
            recv_counts.iter().scan(0usize, |acc, &c| Some(std::mem::replace(acc, *acc + c as usize))).collect();
        let total: usize = recv_counts.iter().map(|&c| c as usize).sum();
        {
            let mut args = ArgBuffer::new();
            let pointers = [
                args.slice_arg(x.buffer(), stream)?.ptr,
                args.slice_arg(experts.buffer(), stream)?.ptr,
                args.slice_arg(&self.slot, stream)?.ptr,
                args.slice_arg_mut(&mut self.send, stream)?.ptr,
                args.slice_arg_mut(&mut self.send_expert, stream)?.ptr,
            ];
            pointers.into_iter().for_each(|p| args.push(p));
            args.push(tokens);
            args.push(hidden);
            // SAFETY: moe_pack_<T>(const T* x, const uint32_t* experts, const uint32_t* slot, T* send,
            // uint32_t* send_expert, size_t tokens, size_t hidden) for this T: x and send hold tokens x hidden
            // elements, the others `tokens`; slot is a permutation of 0..tokens; `args` borrows every buffer.
            unsafe { launch_raw(&self.kernels.pack[self.which], stream, &self.cfg, &mut args)? };
        }
        weft::host::group(|| {
            for peer in 0..nranks {
                let (start, count) = (offsets[peer] as usize, counts[peer] as usize);
                if count > 0 {
                    comm.send(&self.send.slice(start * hidden..(start + count) * hidden), peer, stream)?;
                    comm.send(&self.send_expert.slice(start..start + count), peer, stream)?;
                }
                let (start, count) = (recv_offsets[peer], recv_counts[peer] as usize);
                if count > 0 {
                    comm.recv(&mut self.recv.slice_mut(start * hidden..(start + count) * hidden), peer, stream)?;
                    comm.recv(&mut self.recv_expert.slice_mut(start..start + count), peer, stream)?;
                }
            }
            Ok(())
        })?;
        stream.memcpy_htod(&[total as u32], &mut self.recv_total)?;
        moe_toy_expert::launch(
            stream,
            self.expert_cfg,
            &self.recv,
            &self.recv_expert,
            &self.recv_total,
            &mut self.y,
            hidden,
        )?;
        weft::host::group(|| {
            for peer in 0..nranks {
                let (start, count) = (recv_offsets[peer], recv_counts[peer] as usize);
                if count > 0 {
                    comm.send(&self.y.slice(start * hidden..(start + count) * hidden), peer, stream)?;
                }
                let (start, count) = (offsets[peer] as usize, counts[peer] as usize);
                if count > 0 {
                    comm.recv(&mut self.back.slice_mut(start * hidden..(start + count) * hidden), peer, stream)?;
                }
            }
            Ok(())
        })?;
        let mut args = ArgBuffer::new();
        let pointers = [
            args.slice_arg(&self.back, stream)?.ptr,
            args.slice_arg(&self.slot, stream)?.ptr,
            args.slice_arg(gate, stream)?.ptr,
            args.slice_arg_mut(&mut self.out, stream)?.ptr,
        ];
        pointers.into_iter().for_each(|p| args.push(p));
        args.push(tokens);
        args.push(hidden);
        // SAFETY: moe_unpack_<T>(const T* back, const uint32_t* slot, const float* gate, T* out, size_t tokens,
        // size_t hidden) for this T: back and out hold tokens x hidden elements, slot and gate `tokens`; `args`
        // borrows every buffer until after the launch.
        unsafe { launch_raw(&self.kernels.unpack[self.which], stream, &self.cfg, &mut args)? };
        Ok(())
    }

    pub(super) fn errors(&self, stream: &Arc<CudaStream>, want: &Reference) -> std::result::Result<(f64, f64), Error> {
        check(stream, want, self.hidden, &self.recv, &self.recv_expert, &self.recv_total, &self.out)
    }
}
