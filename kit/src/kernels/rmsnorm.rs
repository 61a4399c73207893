//! Tensor-parallel residual add + RMSNorm, fused with the reduce-scatter before it and the all-gather after it,
//! in one kernel over LSA — the pattern of NCCL's `docs/examples/07_kernel_fusion/01_rmsnorm_lsa`, written anew:
//!
//! ```text
//! rank r owns rows [r·rows/R, (r+1)·rows/R)  (R = LSA team size)
//! h[row]            = sum over ranks of x_rank[row] + residual[row]            (reduce-scatter + residual add)
//! residual_out[row] = h[row]                                                   (the next layer's residual)
//! out[row]          = h[row] / sqrt(mean(h[row]^2) + eps) * weight            (RMSNorm, PyTorch's definition)
//! out on every rank = all rows                                                 (all-gather)
//! ```
//!
//! One block per row (blocks loop over this rank's rows when there are more rows than blocks). Pass 1: the block's
//! threads sum the row's partial activations from every peer's window, add the residual, store `h` into
//! `residual_out` and accumulate the sum of squares, 16 bytes per load ([`Pack`]s) when the row is a whole number
//! of packs and one element at a time otherwise; `block_reduce_sum` gives the row's total. Pass 2: each thread
//! re-reads the `h` it stored itself (so no barrier is needed between the passes; the row was just written, so
//! the reads hit L2), and stores the normalized row straight into every peer's `out` window: the all-gather is
//! the RMSNorm's own store, no separate pass. Normalizing the stored `h` (rounded to `T`) is what PyTorch does
//! with a `bf16` residual stream.
//!
//! Bytes per rank for `N = rows x hidden` elements, `S = N / R` of them this rank's: reads `R·S` of `x` (`S`
//! local) + `S` of residual, writes `S` of `residual_out` + `R·S` of `out` (`S` local): `4N` on one rank. The
//! unfused baseline (`ncclReduceScatter`, `benches/cuda/rmsnorm_epilogue.cu`, `ncclAllGather`) moves the
//! reduce-scatter's and the all-gather's bytes on top of the epilogue's `4S`: `8N` on one rank.
//!
//! Launch with the same grid on every rank (LSA barrier `b` pairs block `b` of every rank) and a block size that
//! is a multiple of 32 (`block_reduce_sum`). `rows` must be a multiple of the LSA team size and every rank of the
//! communicator must be in one LSA team (the host checks both).

use weft::prelude::*;

/// Fused residual add + reduce-scatter + RMSNorm + all-gather. `x`, `out`: windows of `rows x hidden`;
/// `residual`, `residual_out`: this rank's `rows / lsa_size` rows; `weight`: `hidden` elements.
///
/// The first barrier makes every peer's `x` readable and every peer's `out` writable (the peer's earlier work
/// on them is done); the last makes every write into this rank's `out` visible and keeps `x` alive until no peer
/// reads it.
#[weft::kernel(types(f32, bf16), len(x == out, weight >= hidden))]
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_residual_tp<T: Float>(
    dev: &DevComm<Lsa>,
    x: &Window<T>,
    residual: &[T],
    weight: &[T],
    residual_out: &mut [T],
    out: &Window<T>,
    rows: usize,
    hidden: usize,
    eps: f32,
) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let peers = dev.lsa_size();
    let me = dev.lsa_rank() as usize;
    let per_rank = rows / (peers as usize);
    let threads = block_dim_x() as usize;
    let lanes = pack_lanes::<T>();
    let packed = hidden % lanes == 0;
    let row_packs = hidden / lanes;
    let mut local_row = block_idx_x() as usize;
    while local_row < per_rank {
        let row = me * per_rank + local_row;

        // Pass 1: h = sum of the peers' partial rows + residual, into residual_out; sum of squares.
        let mut squares: f32 = 0.0;
        if packed {
            let mut c = thread_idx_x() as usize;
            while c < row_packs {
                let mut h = residual.load_pack(local_row * row_packs + c).widen();
                for peer in 0..peers {
                    h += x.lsa(peer).load_pack(row * row_packs + c).widen();
                }
                let stored = h.narrow();
                residual_out.store_pack(local_row * row_packs + c, stored);
                let back = stored.widen();
                squares += (back * back).lane_sum();
                c += threads;
            }
        } else {
            let mut c = thread_idx_x() as usize;
            while c < hidden {
                let mut h: f32 = residual[local_row * hidden + c].to_f32();
                for peer in 0..peers {
                    h += x.lsa(peer)[row * hidden + c].to_f32();
                }
                let stored = T::from_f32(h);
                residual_out[local_row * hidden + c] = stored;
                squares += stored.to_f32() * stored.to_f32();
                c += threads;
            }
        }
        let scale = (block_reduce_sum(squares) / (hidden as f32) + eps).rsqrt();

        // Pass 2: the normalized row, stored into every rank's out (the all-gather).
        if packed {
            let mut c = thread_idx_x() as usize;
            while c < row_packs {
                let h = residual_out.load_pack(local_row * row_packs + c).widen();
                let v = (h * weight.load_pack(c).widen() * scale).narrow();
                for peer in 0..peers {
                    out.lsa(peer).store_pack(row * row_packs + c, v);
                }
                c += threads;
            }
        } else {
            let mut c = thread_idx_x() as usize;
            while c < hidden {
                let h: f32 = residual_out[local_row * hidden + c].to_f32();
                let v = T::from_f32(h * scale * weight[c].to_f32());
                for peer in 0..peers {
                    out.lsa(peer)[row * hidden + c] = v;
                }
                c += threads;
            }
        }
        local_row += grid_dim_x() as usize;
    }
    bar.sync(Cta, Order::AcqRel);
}
