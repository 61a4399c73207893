//! Mixture-of-experts token dispatch and combine over LSA, with variable token counts per peer and no host
//! round trip.
//!
//! Every rank has `tokens` tokens of `hidden` elements and a top-1 expert per token; expert `e` lives on rank
//! `e / experts_per_rank`. Four kernels, in stream order on every rank:
//!
//! 1. [`moe_route()`] (one block): for each destination rank, which of this rank's tokens go there, in token order.
//!    Writes `order` (this rank's token indices grouped by destination, a window peers read), `position[t]`
//!    (token `t`'s place within its destination group), and pushes `(count, offset in order)` into slot `me` of
//!    every destination's `meta` window: the counts are exchanged first, through a small window.
//! 2. [`moe_dispatch()`]: each rank lays out what it receives by source rank, then token order: received token `j`
//!    comes from the source whose running count covers `j`; its index at the source is read from the source's
//!    `order`, its row copied from the source's `x` window, its expert id from the source's `experts` window.
//!    One block per received token; the total lands in `recv_total[0]` for the next kernel.
//! 3. [`moe_toy_expert()`]: the stand-in for the experts' GEMMs, `y[j] = (expert + 1) · recv[j]`, on the received
//!    layout (local; `y` is the local part of a window so that peers can read it back).
//! 4. [`moe_combine()`]: each token goes home: rank `me` finds token `t` in its destination's `y` at
//!    `sum over sources s < me of count(s → d)` (read from `d`'s `meta`) `+ position[t]`, and writes
//!    `gate[t] · y` into `out[t]`.
//!
//! The unfused baseline (`benches/cuda/moe_dispatch_epilogue.cu` + NCCL) needs the counts on the host before it can
//! post its variable-size `ncclSend`/`ncclRecv`s: route, pack the tokens into a send buffer by destination,
//! `ncclAllToAll` of the counts, a device-to-host copy and a stream synchronisation, grouped send/receive, the
//! expert, grouped send/receive back, unpack. Bytes per rank for `T·H` sent and `Rcv·H` received: the fused path
//! reads each token once from its source and writes it once (dispatch), and reads each expert output once from
//! its owner and writes it once (combine); the baseline also writes and reads the packed send buffer and the
//! returned buffer: two extra passes over this rank's tokens, plus the host synchronisation.
//!
//! Synchronisation: [`moe_route()`]'s first LSA barrier keeps a rank from overwriting its `order` or a peer's
//! `meta` while a peer still reads them (every peer has finished the previous combine), its last one publishes
//! `order` and `meta`. [`moe_dispatch()`] and [`moe_combine()`] open with a barrier (the peers' `order`/`meta`/`y` are
//! complete) and close with one (no peer reads this rank's `x`, `order`, `experts` or `y` any more once the kernel
//! has ended). Same grid on every rank for the multi-block kernels; at most 64 ranks in the LSA team.

use weft::prelude::*;

/// Kernel 1 (launch one block, a multiple of 32 threads, at most 1024): group this rank's tokens by destination
/// rank and push the counts and offsets into every destination's `meta` window (slots `2·me`, `2·me + 1`).
///
/// `experts`: this rank's expert id per token (a window: [`moe_dispatch()`] reads peers'); `order`: a window of
/// `tokens` entries; `meta`: a window of `2·lsa_size` entries; `position`: `tokens` entries. A token whose expert
/// lives on no rank of the LSA team is not routed.
///
/// Each warp takes one contiguous segment of the tokens, 32 at a time: `match_any` groups the 32 by destination and
/// gives each token its rank in its group, so a token's place among its segment's tokens for the same destination
/// takes one step. A prefix over the warps, per destination, then turns places in a segment into places in the
/// destination's group (token order). Every warp works at once: the serial part is `tokens / block` steps.
#[weft::kernel(len(experts >= tokens, order >= tokens, position >= tokens, meta >= 2 * lsa_size))]
pub fn moe_route(
    dev: &DevComm<Lsa>,
    experts: &Window<u32>,
    order: &Window<u32>,
    meta: &Window<u32>,
    position: &mut [u32],
    tokens: usize,
    experts_per_rank: u32,
) {
    // Per warp and destination (`warp · 64 + dest`): how many of the warp's tokens go there; after the prefix, how
    // many of the earlier warps' tokens do.
    let mut before = SharedArray::<u32, 2048>::new();
    let mut counts = SharedArray::<u32, 64>::new();
    let mut offsets = SharedArray::<u32, 64>::new();
    let bar = dev.lsa_barrier(Cta, 0);
    bar.sync(Cta, Order::Acquire);
    let peers = dev.lsa_size();
    let me = dev.lsa_rank();
    let mine = experts.local();
    let lane = lane_id();
    let lanes_below = (1u32 << lane) - 1;
    let warps = block_dim_x() / 32;
    let row = (warp_id() * 64) as usize;
    let mut d = lane;
    while d < peers {
        before[row + d as usize] = 0;
        d += 32;
    }
    sync_warp();

    // This warp's segment: whole chunks of 32 tokens, so that every lane of the warp runs the loop together.
    let span = warps as usize * 32;
    let segment = tokens.div_ceil(span) * 32;
    let first = warp_id() as usize * segment;
    let end = (first + segment).min(tokens);
    // Warps past `busy` have no tokens: the prefix below skips them (on small inputs most of the block).
    let busy = if segment == 0 { 0 } else { tokens.div_ceil(segment) };
    let mut chunk = first;
    while chunk < end {
        let t = chunk + lane as usize;
        let mut dest = peers; // no destination: lanes past the end, unroutable tokens
        if t < end && mine[t] / experts_per_rank < peers {
            dest = mine[t] / experts_per_rank;
        }
        let group = match_any(dest);
        let rank = (group & lanes_below).count_ones();
        if dest < peers {
            position[t] = before[row + dest as usize] + rank;
        }
        sync_warp();
        if dest < peers && rank == 0 {
            before[row + dest as usize] += group.count_ones();
        }
        sync_warp();
        chunk += 32;
    }
    sync_threads();

    let d = thread_idx_x();
    if d < peers {
        let mut running: u32 = 0;
        for w in 0..busy {
            let k = w * 64 + d as usize;
            let here = before[k];
            before[k] = running;
            running += here;
        }
        counts[d as usize] = running;
    }
    sync_threads();
    if thread_idx_x() == 0 {
        let mut running: u32 = 0;
        for d in 0..peers {
            offsets[d as usize] = running;
            running += counts[d as usize];
        }
    }
    sync_threads();

    // This rank's token indices, grouped by destination, in token order within a group; each lane revisits the
    // tokens it placed.
    let mut list = order.local();
    let mut t = first + lane as usize;
    while t < end {
        let d = mine[t] / experts_per_rank;
        if d < peers {
            let place = before[row + d as usize] + position[t];
            position[t] = place;
            list[(offsets[d as usize] + place) as usize] = t as u32;
        }
        t += 32;
    }

    // The counts exchange: slot `me` of every destination's meta.
    let d = thread_idx_x();
    if d < peers {
        let mut theirs = meta.lsa(d);
        theirs[(2 * me) as usize] = counts[d as usize];
        theirs[(2 * me + 1) as usize] = offsets[d as usize];
    }
    bar.sync(Cta, Order::AcqRel);
}

/// Kernel 2 (one block per received token, blocks loop): pull every token routed to this rank from its source.
///
/// `x`: this rank's tokens, `tokens x hidden` (a window); `recv`: `capacity x hidden`; `recv_expert`:
/// `capacity` expert ids; `recv_total[0]`: how many tokens arrived. Tokens past `capacity` are dropped (size
/// `capacity` as `lsa_size x tokens` to never drop any).
#[weft::kernel(
    types(f32, bf16),
    len(recv_expert >= capacity, recv_total >= 1, recv >= capacity * hidden, meta >= 2 * lsa_size)
)]
#[allow(clippy::too_many_arguments)]
pub fn moe_dispatch<T: Float>(
    dev: &DevComm<Lsa>,
    x: &Window<T>,
    experts: &Window<u32>,
    order: &Window<u32>,
    meta: &Window<u32>,
    recv: &mut [T],
    recv_expert: &mut [u32],
    recv_total: &mut [u32],
    hidden: usize,
    capacity: usize,
) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let peers = dev.lsa_size();
    let counts = meta.local();
    let mut total: usize = 0;
    for s in 0..peers {
        total += counts[(2 * s) as usize] as usize;
    }
    if block_idx_x() == 0 && thread_idx_x() == 0 {
        recv_total[0] = total.min(capacity) as u32;
    }
    let threads = block_dim_x() as usize;
    let lanes = pack_lanes::<T>();
    let mut j = block_idx_x() as usize;
    while j < total && j < capacity {
        // The source of received token j: the first whose running count passes j.
        let mut source: u32 = 0;
        let mut start: usize = 0;
        while start + counts[(2 * source) as usize] as usize <= j {
            start += counts[(2 * source) as usize] as usize;
            source += 1;
        }
        let k = counts[(2 * source + 1) as usize] as usize + (j - start);
        let t = order.lsa(source)[k] as usize;
        if thread_idx_x() == 0 {
            recv_expert[j] = experts.lsa(source)[t];
        }
        let row = x.lsa(source);
        if hidden % lanes == 0 {
            // Rows are whole packs: 16 bytes per load and store.
            let (from, to) = (t * (hidden / lanes), j * (hidden / lanes));
            let mut c = thread_idx_x() as usize;
            while c < hidden / lanes {
                recv.store_pack(to + c, row.load_pack(from + c));
                c += threads;
            }
        } else {
            let (from, to) = (t * hidden, j * hidden);
            let mut c = thread_idx_x() as usize;
            while c < hidden {
                recv[to + c] = row[from + c];
                c += threads;
            }
        }
        j += grid_dim_x() as usize;
    }
    bar.sync(Cta, Order::Release);
}

/// Kernel 3 (one block per received token, blocks loop): the stand-in expert, `y[j] = (recv_expert[j] + 1) ·
/// recv[j]` for the first `recv_total[0]` tokens. No communication: `y` is the local part of a window.
#[weft::kernel(types(f32, bf16), len(recv_total >= 1))]
pub fn moe_toy_expert<T: Float>(recv: &[T], recv_expert: &[u32], recv_total: &[u32], y: &mut [T], hidden: usize) {
    let total = recv_total[0] as usize;
    let threads = block_dim_x() as usize;
    let lanes = pack_lanes::<T>();
    let mut j = block_idx_x() as usize;
    while j < total {
        let scale = (recv_expert[j] + 1) as f32;
        if hidden % lanes == 0 {
            let base = j * (hidden / lanes);
            let mut c = thread_idx_x() as usize;
            while c < hidden / lanes {
                y.store_pack(base + c, (recv.load_pack(base + c).widen() * scale).narrow());
                c += threads;
            }
        } else {
            let base = j * hidden;
            let mut c = thread_idx_x() as usize;
            while c < hidden {
                y[base + c] = T::from_f32(recv[base + c].to_f32() * scale);
                c += threads;
            }
        }
        j += grid_dim_x() as usize;
    }
}

/// Kernel 4 (one block per token, blocks loop): bring every token's expert output home, weighted by its gate:
/// `out[t] = gate[t] · y_d[j]` with `d` the rank of token `t`'s expert and `j` its place in `d`'s received layout.
///
/// `y`: the expert outputs, `capacity x hidden` (a window); `experts`, `position`, `gate`: `tokens` entries;
/// `out`: `tokens x hidden`.
#[weft::kernel(
    types(f32, bf16),
    len(experts >= tokens, position >= tokens, gate >= tokens, out >= tokens * hidden, meta >= 2 * lsa_size)
)]
#[allow(clippy::too_many_arguments)]
pub fn moe_combine<T: Float>(
    dev: &DevComm<Lsa>,
    y: &Window<T>,
    meta: &Window<u32>,
    experts: &[u32],
    position: &[u32],
    gate: &[f32],
    out: &mut [T],
    tokens: usize,
    hidden: usize,
    experts_per_rank: u32,
) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let me = dev.lsa_rank();
    let threads = block_dim_x() as usize;
    let lanes = pack_lanes::<T>();
    let mut t = block_idx_x() as usize;
    while t < tokens {
        let d = experts[t] / experts_per_rank;
        // Where d put this rank's tokens: after those of every lower source.
        let theirs = meta.lsa(d);
        let mut j = position[t] as usize;
        for s in 0..me {
            j += theirs[(2 * s) as usize] as usize;
        }
        let weight = gate[t];
        let row = y.lsa(d);
        if hidden % lanes == 0 {
            let (from, to) = (j * (hidden / lanes), t * (hidden / lanes));
            let mut c = thread_idx_x() as usize;
            while c < hidden / lanes {
                out.store_pack(to + c, (row.load_pack(from + c).widen() * weight).narrow());
                c += threads;
            }
        } else {
            let (from, to) = (j * hidden, t * hidden);
            let mut c = thread_idx_x() as usize;
            while c < hidden {
                out[to + c] = T::from_f32(weight * row[from + c].to_f32());
                c += threads;
            }
        }
        t += grid_dim_x() as usize;
    }
    bar.sync(Cta, Order::Release);
}
