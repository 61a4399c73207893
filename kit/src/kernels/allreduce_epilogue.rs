//! All-reduce + bias + residual, the epilogue of every tensor-parallel row-parallel linear layer, fused into the
//! all-reduce over LSA:
//!
//! ```text
//! out[r][c] = sum over ranks of x_rank[r][c]  +  bias[c]  +  residual[r][c]        (x, out: rows x hidden)
//! ```
//!
//! Two algorithms, the same arguments but one scratch window:
//!
//! - [`allreduce_bias_residual_one_shot()`] (small messages, or few ranks): every rank reads every peer's `x` and
//!   writes the whole result. Per rank: reads `nranks x N` elements over NVLink (`N` from itself) + `N` of
//!   residual, writes `N`. Two LSA barriers; the latency of one pass.
//! - [`allreduce_bias_residual_two_shot()`] (large messages on many ranks): rank `r` reduces slice `r` (`N / nranks`
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
//! Both kernels move 16 bytes per load and store ([`Pack`]s: 4 `f32` or 8 `bf16` lanes) when a row is a whole
//! number of packs (`hidden % pack_lanes::<T>() == 0`, every transformer width), and one element at a time
//! otherwise. They accumulate in `f32` (`widen` / `narrow`, `to_f32` / `T::from_f32`), add in the same order on
//! every rank (so every rank's result is bitwise the same), and track the column of a pack or element
//! incrementally, never dividing it out per element. See the example `03_allreduce_bias_residual.rs` for the
//! figures.
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
    // Launched with `LaunchConfig::programmatic()`, the kernel may start before the previous one on the stream ends:
    // wait for it before `x` is offered to the peers or `residual` read (a no-op in any other launch).
    pdl_wait();
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let peers = dev.lsa_size();
    let stride = grid_size_1d();
    let lanes = pack_lanes::<T>();
    if hidden % lanes == 0 {
        // Pack p holds elements p·lanes.. of one row: its bias is pack `p mod (hidden / lanes)`.
        let row_packs = hidden / lanes;
        let step = stride % row_packs;
        let mut p = index_1d();
        let mut c = p % row_packs;
        while p < n / lanes {
            let mut acc = residual.load_pack(p).widen() + bias.load_pack(c).widen();
            for peer in 0..peers {
                acc += x.lsa(peer).load_pack(p).widen();
            }
            out.store_pack(p, acc.narrow());
            p += stride;
            c = epilogue_next_column(c, step, row_packs);
        }
    } else {
        let step = stride % hidden;
        let mut i = index_1d();
        let mut c = i % hidden;
        while i < n {
            let mut acc: f32 = residual[i].to_f32() + bias[c].to_f32();
            for peer in 0..peers {
                acc += x.lsa(peer)[i].to_f32();
            }
            out[i] = T::from_f32(acc);
            i += stride;
            c = epilogue_next_column(c, step, hidden);
        }
    }
    // A programmatic dependent may start launching (its `pdl_wait()` still waits for this kernel to end).
    pdl_launch_dependents();
    bar.sync(Cta, Order::Release);
}

/// Two-shot all-reduce + bias + residual over the LSA team: reduce-scatter with the epilogue into `y`, then an
/// all-gather of `y` into `out`.
///
/// Arguments as [`allreduce_bias_residual_one_shot()`], plus `y`: a scratch window of `n` elements (only this
/// rank's slice of it is written, only by this kernel). With `u` the unit of work (a pack of
/// `pack_lanes::<T>()` elements when rows are whole packs, else an element) and `U = n / u` units, slice `q` is
/// units `[U * q / lsa_size, U * (q + 1) / lsa_size)`.
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
    // As in the one-shot kernel: after the previous kernel on the stream, when launched programmatically.
    pdl_wait();
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let peers = dev.lsa_size();
    let me = dev.lsa_rank();
    let stride = grid_size_1d();
    let lanes = pack_lanes::<T>();
    let packed = hidden % lanes == 0;
    let units = if packed { n / lanes } else { n };
    let row_units = if packed { hidden / lanes } else { hidden };
    let step = stride % row_units;
    let lo = units * (me as usize) / (peers as usize);
    let hi = units * (me as usize + 1) / (peers as usize);
    let mut mine = y.local();

    // Phase 1: reduce this rank's slice from every peer, add bias and residual, keep it in y and out.
    let mut u = lo + index_1d();
    let mut c = u % row_units;
    if packed {
        while u < hi {
            let mut acc = residual.load_pack(u).widen() + bias.load_pack(c).widen();
            for peer in 0..peers {
                acc += x.lsa(peer).load_pack(u).widen();
            }
            let r = acc.narrow();
            mine.store_pack(u, r);
            out.store_pack(u, r);
            u += stride;
            c = epilogue_next_column(c, step, row_units);
        }
    } else {
        while u < hi {
            let mut acc: f32 = residual[u].to_f32() + bias[c].to_f32();
            for peer in 0..peers {
                acc += x.lsa(peer)[u].to_f32();
            }
            let r = T::from_f32(acc);
            mine[u] = r;
            out[u] = r;
            u += stride;
            c = epilogue_next_column(c, step, row_units);
        }
    }

    // Every rank's slice of y is complete (for this block's offsets) and no peer reads x any more.
    bar.sync(Cta, Order::AcqRel);
    pdl_launch_dependents();

    // Phase 2: gather the other slices from their owners' y, with the offsets phase 1 used.
    for owner in 0..peers {
        if owner != me {
            let end = units * (owner as usize + 1) / (peers as usize);
            let theirs = y.lsa(owner);
            let mut v = units * (owner as usize) / (peers as usize) + index_1d();
            if packed {
                while v < end {
                    out.store_pack(v, theirs.load_pack(v));
                    v += stride;
                }
            } else {
                while v < end {
                    out[v] = theirs[v];
                    v += stride;
                }
            }
        }
    }
}
