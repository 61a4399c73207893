//! All-reduce + bias + residual, the epilogue of every tensor-parallel row-parallel linear layer, fused into the
//! all-reduce over LSA:
//!
//! ```text
//! out[r][c] = sum over ranks of x_rank[r][c]  +  bias[c]  +  residual[r][c]        (x, out: rows x hidden)
//! ```
//!
//! Two algorithms, the same arguments but one scratch window:
//!
//! - [`allreduce_bias_residual_one_shot`] (small messages, or few ranks): every rank reads every peer's `x` and
//!   writes the whole result. Per rank: reads `nranks x N` elements over NVLink (`N` from itself) + `N` of
//!   residual, writes `N`. Two LSA barriers; the latency of one pass.
//! - [`allreduce_bias_residual_two_shot`] (large messages on many ranks): rank `r` reduces slice `r` (`N / nranks`
//!   elements) from every peer, applies the epilogue, and stores the result in its own `y` window slice (and in
//!   its own `out`); after an LSA barrier every rank copies the other slices from their owners' `y`. Per rank:
//!   reads `N` of `x` + `N / nranks` of residual + `(nranks - 1) / nranks x N` of peers' `y`, writes
//!   `N / nranks` of `y` + `N` of `out`: about `2N` read instead of `nranks x N`.
//!
//! The unfused baseline is `ncclAllReduce(x -> tmp)` then the epilogue kernel of
//! `benches/cuda/allreduce_epilogue.cu` (`out = tmp + bias + residual`): NCCL's all-reduce moves its own bytes
//! (on one rank a copy: read `N`, write `N`), and the epilogue reads `tmp` and `residual` and writes `out` again
//! (`3N`). On one rank that is `5N` against the fused one-shot's `3N`.
//!
//! Both kernels accumulate in `f32` (`to_f32` / `T::from_f32`), add in the same order on every rank (so every
//! rank's result is bitwise the same), and work on any `rows x hidden`: the column of element `i` is tracked
//! incrementally, never divided out per element. Each thread handles four elements one grid stride apart per
//! trip, loads first, stores last: four independent loads per peer in flight per thread. The vocabulary has no
//! vector (16-byte) loads, so this is how these kernels keep enough bytes in flight; see the example
//! `03_allreduce_bias_residual.rs` for the figures.
//!
//! Launch either kernel with the same grid on every rank (`LaunchConfig::one_wave` on identical GPUs): LSA
//! barrier `b` pairs block `b` of every rank.

use weft::prelude::*;

/// `col + step` wrapped into `0..hidden`, for `col < hidden` and `step < hidden`: the column of the element one
/// grid stride further on, without a division.
#[weft::device_fn]
pub fn epilogue_next_column(col: usize, step: usize, hidden: usize) -> usize {
    let next = col + step;
    if next >= hidden {
        next - hidden
    } else {
        next
    }
}

/// One-shot all-reduce + bias + residual over the LSA team: every rank reads all of `x` from every peer.
///
/// `x`: this rank's partial activations (a symmetric window of `n = rows x hidden` elements); `bias`: `hidden`
/// elements; `residual`, `out`: `n` elements. The first barrier makes every peer's `x` readable, the second
/// keeps each peer's `x` alive until nobody reads it any more.
#[weft::kernel(types(f32, bf16), len(residual >= n, out >= n, bias >= hidden, x >= n))]
pub fn allreduce_bias_residual_one_shot<T: Float>(
    dev: &DevComm<Lsa>,
    x: &Window<T>,
    bias: &[T],
    residual: &[T],
    out: &mut [T],
    n: usize,
    hidden: usize,
) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let peers = dev.lsa_size();
    let stride = grid_size_1d();
    let step = stride % hidden;
    let mut i0 = index_1d();
    let mut c0 = i0 % hidden;
    // Four elements per trip, one stride apart: i0, i1, i2, i3.
    while i0 + 3 * stride < n {
        let i1 = i0 + stride;
        let i2 = i1 + stride;
        let i3 = i2 + stride;
        let c1 = epilogue_next_column(c0, step, hidden);
        let c2 = epilogue_next_column(c1, step, hidden);
        let c3 = epilogue_next_column(c2, step, hidden);
        let mut a0: f32 = residual[i0].to_f32() + bias[c0].to_f32();
        let mut a1: f32 = residual[i1].to_f32() + bias[c1].to_f32();
        let mut a2: f32 = residual[i2].to_f32() + bias[c2].to_f32();
        let mut a3: f32 = residual[i3].to_f32() + bias[c3].to_f32();
        for peer in 0..peers {
            let v = x.lsa(peer);
            a0 += v[i0].to_f32();
            a1 += v[i1].to_f32();
            a2 += v[i2].to_f32();
            a3 += v[i3].to_f32();
        }
        out[i0] = T::from_f32(a0);
        out[i1] = T::from_f32(a1);
        out[i2] = T::from_f32(a2);
        out[i3] = T::from_f32(a3);
        i0 = i3 + stride;
        c0 = epilogue_next_column(c3, step, hidden);
    }
    while i0 < n {
        let mut a: f32 = residual[i0].to_f32() + bias[c0].to_f32();
        for peer in 0..peers {
            a += x.lsa(peer)[i0].to_f32();
        }
        out[i0] = T::from_f32(a);
        i0 += stride;
        c0 = epilogue_next_column(c0, step, hidden);
    }
    bar.sync(Cta, Order::Release);
}

/// Two-shot all-reduce + bias + residual over the LSA team: reduce-scatter with the epilogue into `y`, then an
/// all-gather of `y` into `out`.
///
/// Arguments as [`allreduce_bias_residual_one_shot`], plus `y`: a scratch window of `n` elements (only this
/// rank's slice of it is written, only by this kernel). Slice `q` is `[n * q / lsa_size, n * (q + 1) / lsa_size)`.
///
/// Block `b` handles the same offsets within every slice in both phases, so the middle barrier (which pairs block
/// `b` of every rank) orders each `y` element's write before its remote reads. No closing barrier: once every
/// block passed the middle one, no peer reads `x` any more, and `y` is next written by the next launch only after
/// its first barrier, which every peer reaches only after finishing this launch.
#[weft::kernel(types(f32, bf16), len(residual >= n, out >= n, bias >= hidden, x >= n, y >= n))]
#[allow(clippy::too_many_arguments)]
pub fn allreduce_bias_residual_two_shot<T: Float>(
    dev: &DevComm<Lsa>,
    x: &Window<T>,
    y: &Window<T>,
    bias: &[T],
    residual: &[T],
    out: &mut [T],
    n: usize,
    hidden: usize,
) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let peers = dev.lsa_size();
    let me = dev.lsa_rank();
    let stride = grid_size_1d();
    let step = stride % hidden;
    let lo = n * (me as usize) / (peers as usize);
    let hi = n * (me as usize + 1) / (peers as usize);
    let mut mine = y.local();

    // Phase 1: reduce this rank's slice from every peer, add bias and residual, keep it in y and out.
    let mut i0 = lo + index_1d();
    let mut c0 = i0 % hidden;
    while i0 + 3 * stride < hi {
        let i1 = i0 + stride;
        let i2 = i1 + stride;
        let i3 = i2 + stride;
        let c1 = epilogue_next_column(c0, step, hidden);
        let c2 = epilogue_next_column(c1, step, hidden);
        let c3 = epilogue_next_column(c2, step, hidden);
        let mut a0: f32 = residual[i0].to_f32() + bias[c0].to_f32();
        let mut a1: f32 = residual[i1].to_f32() + bias[c1].to_f32();
        let mut a2: f32 = residual[i2].to_f32() + bias[c2].to_f32();
        let mut a3: f32 = residual[i3].to_f32() + bias[c3].to_f32();
        for peer in 0..peers {
            let v = x.lsa(peer);
            a0 += v[i0].to_f32();
            a1 += v[i1].to_f32();
            a2 += v[i2].to_f32();
            a3 += v[i3].to_f32();
        }
        let r0 = T::from_f32(a0);
        let r1 = T::from_f32(a1);
        let r2 = T::from_f32(a2);
        let r3 = T::from_f32(a3);
        mine[i0] = r0;
        mine[i1] = r1;
        mine[i2] = r2;
        mine[i3] = r3;
        out[i0] = r0;
        out[i1] = r1;
        out[i2] = r2;
        out[i3] = r3;
        i0 = i3 + stride;
        c0 = epilogue_next_column(c3, step, hidden);
    }
    while i0 < hi {
        let mut a: f32 = residual[i0].to_f32() + bias[c0].to_f32();
        for peer in 0..peers {
            a += x.lsa(peer)[i0].to_f32();
        }
        let r = T::from_f32(a);
        mine[i0] = r;
        out[i0] = r;
        i0 += stride;
        c0 = epilogue_next_column(c0, step, hidden);
    }

    // Every rank's slice of y is complete (for this block's offsets) and no peer reads x any more.
    bar.sync(Cta, Order::AcqRel);

    // Phase 2: gather the other slices from their owners' y, with the offsets phase 1 used.
    for owner in 0..peers {
        if owner != me {
            let start = n * (owner as usize) / (peers as usize);
            let end = n * (owner as usize + 1) / (peers as usize);
            let theirs = y.lsa(owner);
            let mut j0 = start + index_1d();
            while j0 + 3 * stride < end {
                let j1 = j0 + stride;
                let j2 = j1 + stride;
                let j3 = j2 + stride;
                let v0 = theirs[j0];
                let v1 = theirs[j1];
                let v2 = theirs[j2];
                let v3 = theirs[j3];
                out[j0] = v0;
                out[j1] = v1;
                out[j2] = v2;
                out[j3] = v3;
                j0 = j3 + stride;
            }
            while j0 < end {
                out[j0] = theirs[j0];
                j0 += stride;
            }
        }
    }
}
