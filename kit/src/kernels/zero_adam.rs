//! A ZeRO-style optimizer step in one kernel over LSA: reduce-scatter of the gradients, an AdamW update of this
//! rank's shard (f32 master weights and moments), and all-gather of the updated parameters.
//!
//! ```text
//! rank r owns parameters [P·r/R, P·(r+1)/R)                      (R = LSA team size, P parameters)
//! g      = grad_scale · sum over ranks of grads_rank[i]          (reduce-scatter; grad_scale = 1/R averages)
//! m      = beta1·m + (1 − beta1)·g
//! v      = beta2·v + (1 − beta2)·g²
//! master = master − lr·( (m / bc1) / (sqrt(v / bc2) + eps) + weight_decay·master )   (AdamW, PyTorch's form)
//! params[i] on every rank = master rounded to T                   (all-gather)
//! ```
//! where `bc1 = 1 − beta1^t`, `bc2 = 1 − beta2^t` are computed on the host for step `t`.
//!
//! **One kernel, the all-gather pushed**, rather than two phases separated by an LSA barrier or two kernels: each
//! updated parameter is in a register when it is computed, so storing it straight into every rank's `params`
//! window *is* the all-gather — no second pass that re-reads the shard, no second launch. A pull all-gather would
//! need every shard finished before any rank reads it (a middle barrier) and would read every parameter once more.
//! Two barriers remain: the first before touching any peer's memory (every peer's gradients are complete and its
//! earlier work on `params` — the forward and backward passes — is done), the last after every store (a rank's
//! kernel ends only when every peer has finished writing into its `params` and reading its `grads`).
//!
//! Bytes per rank, `S = P / R` parameters of this rank, `s` bytes per element of `T`: reads `R·S·s` of gradients
//! (`S·s` local) and `12·S` of master/m/v, writes `12·S` of master/m/v and `R·S·s` of parameters (`S·s` local). On
//! one rank `(24 + 2s)·P` bytes, against `(24 + 6s)·P` for `ncclReduceScatter` + the epilogue of
//! `benches/cuda/zero_adam_epilogue.cu` + `ncclAllGather` (the collectives are copies there).
//!
//! Launch with the same grid on every rank (LSA barrier `b` pairs block `b` of every rank); `n` must be the same
//! on every rank, and the shard slices `master`, `m`, `v` hold `n·(r+1)/R − n·r/R` elements on rank `r`.

use weft::prelude::*;

/// Fused reduce-scatter + AdamW + all-gather (see the module docs). `grads`, `params`: windows of `n` elements;
/// `master`, `m`, `v`: this rank's shard.
#[weft::kernel(types(f32, bf16), len(grads == params, master == m, master == v, grads >= n))]
#[allow(clippy::too_many_arguments)]
pub fn zero_adam_step<T: Float>(
    dev: &DevComm<Lsa>,
    grads: &Window<T>,
    params: &Window<T>,
    master: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    n: usize,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    bias_correction1: f32,
    bias_correction2: f32,
    grad_scale: f32,
) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let peers = dev.lsa_size();
    let me = dev.lsa_rank() as usize;
    let lo = n * me / (peers as usize);
    let hi = n * (me + 1) / (peers as usize);
    let lanes = pack_lanes::<T>();
    if n % (lanes * peers as usize) == 0 {
        // Every shard is whole packs: 16 bytes of gradients and parameters per load and store, the f32 master
        // weights and moments in the same lanes (`load_wide`: one 16-byte load per four lanes).
        let first_pack = lo / lanes;
        for q in grid_stride((hi - lo) / lanes) {
            let mut g = WidePack::<T>::splat(0.0);
            for peer in 0..peers {
                g += grads.lsa(peer).load_pack(first_pack + q).widen();
            }
            g *= grad_scale;
            let first = m.load_wide::<T>(q) * beta1 + g * (1.0 - beta1);
            let second = v.load_wide::<T>(q) * beta2 + g * g * (1.0 - beta2);
            m.store_wide(q, first);
            v.store_wide(q, second);
            let weight = master.load_wide::<T>(q);
            let step = (first / bias_correction1) / ((second / bias_correction2).sqrt() + eps);
            let updated = weight - (step + weight * weight_decay) * lr;
            master.store_wide(q, updated);
            let rounded = updated.narrow();
            for peer in 0..peers {
                params.lsa(peer).store_pack(first_pack + q, rounded);
            }
        }
    } else {
        for o in grid_stride(hi - lo) {
            let i = lo + o;
            let mut g: f32 = 0.0;
            for peer in 0..peers {
                g += grads.lsa(peer)[i].to_f32();
            }
            g *= grad_scale;
            let first = beta1 * m[o] + (1.0 - beta1) * g;
            let second = beta2 * v[o] + (1.0 - beta2) * g * g;
            m[o] = first;
            v[o] = second;
            let weight = master[o];
            let step = (first / bias_correction1) / ((second / bias_correction2).sqrt() + eps);
            let updated = weight - lr * (step + weight_decay * weight);
            master[o] = updated;
            let rounded = T::from_f32(updated);
            for peer in 0..peers {
                params.lsa(peer)[i] = rounded;
            }
        }
    }
    bar.sync(Cta, Order::AcqRel);
}
