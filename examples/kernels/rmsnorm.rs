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
//! One block per row (blocks loop over this rank's rows when there are more rows than blocks): the block's
//! threads sum the row's partial activations from every peer's window, add the residual, keep `h` in shared
//! memory (f32, up to 8192 columns; wider rows are re-read from `residual_out`), reduce the sum of squares with
//! `block_reduce_sum`, and write the normalized row straight into every peer's `out` window: the all-gather is
//! the RMSNorm's own store, no separate pass.
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
    let mut cache = SharedArray::<f32, 8192>::new();
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let peers = dev.lsa_size();
    let me = dev.lsa_rank() as usize;
    let per_rank = rows / (peers as usize);
    let threads = block_dim_x() as usize;
    let cached = hidden <= 8192;
    let mut local_row = block_idx_x() as usize;
    while local_row < per_rank {
        let base = (me * per_rank + local_row) * hidden;
        let local_base = local_row * hidden;

        // h = sum of the peers' partial rows + residual; four columns per thread per trip, loads first.
        let mut squares: f32 = 0.0;
        let mut c0 = thread_idx_x() as usize;
        while c0 + 3 * threads < hidden {
            let c1 = c0 + threads;
            let c2 = c1 + threads;
            let c3 = c2 + threads;
            let mut h0: f32 = residual[local_base + c0].to_f32();
            let mut h1: f32 = residual[local_base + c1].to_f32();
            let mut h2: f32 = residual[local_base + c2].to_f32();
            let mut h3: f32 = residual[local_base + c3].to_f32();
            for peer in 0..peers {
                let v = x.lsa(peer);
                h0 += v[base + c0].to_f32();
                h1 += v[base + c1].to_f32();
                h2 += v[base + c2].to_f32();
                h3 += v[base + c3].to_f32();
            }
            residual_out[local_base + c0] = T::from_f32(h0);
            residual_out[local_base + c1] = T::from_f32(h1);
            residual_out[local_base + c2] = T::from_f32(h2);
            residual_out[local_base + c3] = T::from_f32(h3);
            if cached {
                cache[c0] = h0;
                cache[c1] = h1;
                cache[c2] = h2;
                cache[c3] = h3;
            }
            squares += h0 * h0 + h1 * h1 + h2 * h2 + h3 * h3;
            c0 = c3 + threads;
        }
        while c0 < hidden {
            let mut h: f32 = residual[local_base + c0].to_f32();
            for peer in 0..peers {
                h += x.lsa(peer)[base + c0].to_f32();
            }
            residual_out[local_base + c0] = T::from_f32(h);
            if cached {
                cache[c0] = h;
            }
            squares += h * h;
            c0 += threads;
        }

        // Each thread reads back only the columns it wrote (here and in the next row), so the cache needs no
        // barrier of its own.
        let total = block_reduce_sum(squares);
        let scale = (total / (hidden as f32) + eps).rsqrt();

        // The normalized row, stored into every rank's out (the all-gather).
        let mut c = thread_idx_x() as usize;
        while c < hidden {
            let h: f32 = if cached { cache[c] } else { residual_out[local_base + c].to_f32() };
            let v = T::from_f32(h * scale * weight[c].to_f32());
            for peer in 0..peers {
                out.lsa(peer)[base + c] = v;
            }
            c += threads;
        }
        local_row += grid_dim_x() as usize;
    }
    bar.sync(Cta, Order::AcqRel);
}
