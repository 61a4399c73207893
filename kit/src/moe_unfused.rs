//! The unfused MoE run, shared by `examples/06_moe_dispatch.rs` (through `moe/unfused.rs`) and the fused
//! benchmark's MoE case (`benches/fused/cases/moe.rs`): the kernels of `benches/cuda/moe_dispatch_epilogue.cu`
//! around NCCL's variable-size all-to-all — route, `ncclAllToAll` of the counts, a host round trip for the sizes,
//! pack, grouped `ncclSend`/`ncclRecv`, the stand-in expert, grouped send/receive back, unpack.
//!
//! Both use it as `weft_kit::moe_unfused`.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, ValidAsZeroBits};
use weft::host::launch::{launch_raw, ArgBuffer};
use weft::host::{Active, Communicator, Error, LaunchConfig, Window};

use crate::kernels::moe::moe_toy_expert;

/// The baseline's kernels for one element type, and their launch geometry.
pub struct UnfusedKernels {
    /// `moe_route_counts`, launched as one block of `route_block` threads.
    pub route_counts: CudaFunction,
    /// Threads of the routing block.
    pub route_block: u32,
    /// `moe_pack_<T>`, launched with `pack_cfg`.
    pub pack: CudaFunction,
    /// `moe_unpack_<T>`, launched with `pack_cfg`.
    pub unpack: CudaFunction,
    /// Pack and unpack geometry (one block per token, blocks loop).
    pub pack_cfg: LaunchConfig,
    /// The stand-in expert's geometry (the fused side's).
    pub expert_cfg: LaunchConfig,
}

/// The problem: `tokens` local tokens of `hidden` elements, `experts_per_rank` experts on every rank.
#[derive(Debug, Clone, Copy)]
pub struct Problem {
    /// Tokens this rank routes.
    pub tokens: usize,
    /// Elements per token.
    pub hidden: usize,
    /// Experts per rank (expert `e` lives on rank `e / experts_per_rank`).
    pub experts_per_rank: u32,
}

/// What both sides write, and the checks compare: the received rows, their expert ids and count, the combined
/// output.
pub struct Outputs<'a, T> {
    /// Received rows (room for `capacity` tokens).
    pub recv: &'a mut CudaSlice<T>,
    /// Their expert ids.
    pub recv_expert: &'a mut CudaSlice<u32>,
    /// Their count, in `[0]`.
    pub recv_total: &'a mut CudaSlice<u32>,
    /// The combined output, `tokens x hidden`.
    pub out: &'a mut CudaSlice<T>,
}

/// The baseline's own buffers: routing and counts, the packed send buffer, the expert's output, the rows sent back.
pub struct Scratch<T> {
    counts: CudaSlice<u32>,
    offsets: CudaSlice<u32>,
    slot: CudaSlice<u32>,
    recv_counts: CudaSlice<u32>,
    send: CudaSlice<T>,
    send_expert: CudaSlice<u32>,
    y: CudaSlice<T>,
    back: CudaSlice<T>,
}

impl<T: DeviceRepr + ValidAsZeroBits> Scratch<T> {
    /// Zeroed buffers for `problem` on `nranks` ranks, with room to receive `capacity` tokens.
    pub fn new(stream: &Arc<CudaStream>, nranks: usize, problem: Problem, capacity: usize) -> Result<Self, Error> {
        let (tokens, hidden) = (problem.tokens, problem.hidden);
        Ok(Scratch {
            counts: stream.alloc_zeros(nranks)?,
            offsets: stream.alloc_zeros(nranks)?,
            slot: stream.alloc_zeros(tokens)?,
            recv_counts: stream.alloc_zeros(nranks)?,
            send: stream.alloc_zeros(tokens * hidden)?,
            send_expert: stream.alloc_zeros(tokens)?,
            y: stream.alloc_zeros(capacity * hidden)?,
            back: stream.alloc_zeros(tokens * hidden)?,
        })
    }
}

/// One unfused run on `stream`: route, count exchange, host synchronisation, pack, send/receive, expert, send/receive
/// back, unpack. `x` and `experts` are read as this rank's plain memory (the windows the fused side also uses).
#[allow(clippy::too_many_arguments)]
pub fn run<T: weft::device::Float + weft::device::Element + weft::host::Element + moe_toy_expert::Instantiated>(
    comm: &Communicator<Active>,
    stream: &Arc<CudaStream>,
    k: &UnfusedKernels,
    problem: Problem,
    s: &mut Scratch<T>,
    o: Outputs<'_, T>,
    x: &Window<'_, T>,
    experts: &Window<'_, u32>,
    gate: &impl DevicePtr<f32>,
) -> Result<(), Error> {
    let (nranks, tokens, hidden) = (comm.nranks(), problem.tokens, problem.hidden);
    {
        let mut args = ArgBuffer::new();
        let pointers = [
            args.slice_arg(experts.buffer(), stream)?.ptr,
            args.slice_arg_mut(&mut s.counts, stream)?.ptr,
            args.slice_arg_mut(&mut s.offsets, stream)?.ptr,
            args.slice_arg_mut(&mut s.slot, stream)?.ptr,
        ];
        pointers.into_iter().for_each(|p| args.push(p));
        args.push(tokens);
        args.push(problem.experts_per_rank);
        args.push(nranks as u32);
        // SAFETY: moe_route_counts(const uint32_t* experts, uint32_t* counts, uint32_t* offsets, uint32_t* slot,
        // size_t tokens, uint32_t experts_per_rank, uint32_t nranks): experts and slot hold `tokens` entries,
        // counts and offsets `nranks` (≤ 64); `args` borrows every buffer until after the launch.
        unsafe { launch_raw(&k.route_counts, stream, &LaunchConfig::linear(1, k.route_block), &mut args)? };
    }
    comm.all_to_all(&s.counts, &mut s.recv_counts, stream)?;
    // NCCL's point-to-point sizes are host values: the round trip the fused path does not have.
    let counts = weft::host::cuda::download(stream, &s.counts)?;
    let offsets = weft::host::cuda::download(stream, &s.offsets)?;
    let recv_counts = weft::host::cuda::download(stream, &s.recv_counts)?;
    let recv_offsets: Vec<usize> =
        recv_counts.iter().scan(0usize, |acc, &c| Some(std::mem::replace(acc, *acc + c as usize))).collect();
    let total: usize = recv_counts.iter().map(|&c| c as usize).sum();
    {
        let mut args = ArgBuffer::new();
        let pointers = [
            args.slice_arg(x.buffer(), stream)?.ptr,
            args.slice_arg(experts.buffer(), stream)?.ptr,
            args.slice_arg(&s.slot, stream)?.ptr,
            args.slice_arg_mut(&mut s.send, stream)?.ptr,
            args.slice_arg_mut(&mut s.send_expert, stream)?.ptr,
        ];
        pointers.into_iter().for_each(|p| args.push(p));
        args.push(tokens);
        args.push(hidden);
        // SAFETY: moe_pack_<T>(const T* x, const uint32_t* experts, const uint32_t* slot, T* send,
        // uint32_t* send_expert, size_t tokens, size_t hidden) for this T: x and send hold tokens x hidden
        // elements, the others `tokens`; slot is a permutation of 0..tokens; `args` borrows every buffer.
        unsafe { launch_raw(&k.pack, stream, &k.pack_cfg, &mut args)? };
    }
    {
        // One NCCL group: each peer's rows and expert ids out of `send`, theirs into their ranges of `recv`. The
        // batch borrows every buffer until the group has launched.
        let sent = |peer: usize| (offsets[peer] as usize, counts[peer] as usize);
        let rows: Vec<_> =
            (0..nranks).map(|p| s.send.slice(sent(p).0 * hidden..(sent(p).0 + sent(p).1) * hidden)).collect();
        let ids: Vec<_> = (0..nranks).map(|p| s.send_expert.slice(sent(p).0..sent(p).0 + sent(p).1)).collect();
        let received = |peer: usize| (recv_offsets[peer], recv_counts[peer] as usize);
        let mut batch = weft::host::Batch::new();
        for peer in (0..nranks).filter(|&p| sent(p).1 > 0) {
            batch.send(comm, &rows[peer], peer, stream)?;
            batch.send(comm, &ids[peer], peer, stream)?;
        }
        let row_parts = (0..nranks).map(|p| (p, received(p).0 * hidden..(received(p).0 + received(p).1) * hidden));
        let id_parts = (0..nranks).map(|p| (p, received(p).0..received(p).0 + received(p).1));
        batch.recv_parts(comm, &mut *o.recv, row_parts, stream)?;
        batch.recv_parts(comm, &mut *o.recv_expert, id_parts, stream)?;
        batch.launch()?;
    }
    stream.memcpy_htod(&[total as u32], o.recv_total)?;
    moe_toy_expert::launch(stream, k.expert_cfg, o.recv, o.recv_expert, o.recv_total, &mut s.y, hidden)?;
    {
        // And back: the expert's rows to the peers they came from, ours into their ranges of `back`.
        let received = |peer: usize| (recv_offsets[peer], recv_counts[peer] as usize);
        let rows: Vec<_> =
            (0..nranks).map(|p| s.y.slice(received(p).0 * hidden..(received(p).0 + received(p).1) * hidden)).collect();
        let mut batch = weft::host::Batch::new();
        for peer in (0..nranks).filter(|&p| received(p).1 > 0) {
            batch.send(comm, &rows[peer], peer, stream)?;
        }
        let parts = (0..nranks).map(|p| {
            let (start, count) = (offsets[p] as usize, counts[p] as usize);
            (p, start * hidden..(start + count) * hidden)
        });
        batch.recv_parts(comm, &mut s.back, parts, stream)?;
        batch.launch()?;
    }
    let mut args = ArgBuffer::new();
    let pointers = [
        args.slice_arg(&s.back, stream)?.ptr,
        args.slice_arg(&s.slot, stream)?.ptr,
        args.slice_arg(gate, stream)?.ptr,
        args.slice_arg_mut(o.out, stream)?.ptr,
    ];
    pointers.into_iter().for_each(|p| args.push(p));
    args.push(tokens);
    args.push(hidden);
    // SAFETY: moe_unpack_<T>(const T* back, const uint32_t* slot, const float* gate, T* out, size_t tokens,
    // size_t hidden) for this T: back and out hold tokens x hidden elements, slot and gate `tokens`; `args`
    // borrows every buffer until after the launch.
    unsafe { launch_raw(&k.unpack, stream, &k.pack_cfg, &mut args)? };
    Ok(())
}
