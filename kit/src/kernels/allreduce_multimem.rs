//! All-reduce + bias + residual through NVLink SHARP multicast (multimem): the switch reduces.
//!
//! ```text
//! out[r][c] = sum over ranks of x_rank[r][c]  +  bias[c]  +  residual[r][c]        (x, out: rows x hidden)
//! ```
//!
//! [`allreduce_bias_residual_multimem()`] is the one-shot of kernels/allreduce_epilogue.rs with its inner loop over
//! peers replaced by one `multimem.ld_reduce` per element: every rank reads each element once, through the window's
//! multicast address, and the NVSwitch returns the sum over the LSA team. Per rank that is `N` loads instead of
//! `nranks x N`, with the same two LSA barriers (the first makes every peer's `x` readable, the second keeps it
//! alive until nobody reads it any more).
//!
//! It needs a device communicator with multimem (`DevComm<LsaMultimem>`, `Requirements::multimem`), which exists
//! only where NVLink SHARP does (NVSwitch systems with NVLS enabled). weft's GPU machine has one GPU and runs with
//! `NCCL_NVLS_ENABLE=0`: there the request is refused with `Error::MissingCapability` before anything launches
//! (tests/gpu_multimem.rs), and the kernel is compiled, not run (tests/codegen.rs compiles it against each NCCL
//! release's headers). The selector (select.rs) does not pick it yet: no measurement exists.

use weft::prelude::*;

/// One-shot all-reduce + bias + residual over the LSA team, the sum taken by the switch (module docs).
///
/// `x`: this rank's partial activations (a symmetric window of `n = rows x hidden` elements); `bias`: `hidden`
/// elements; `residual`, `out`: `n` elements. Accumulates in `f32`; every rank reads the same sums, so every
/// rank's result is the same.
#[weft::kernel(types(f32, bf16), len(residual >= n, out >= n, bias >= hidden, x >= n))]
pub fn allreduce_bias_residual_multimem<T: Float + MultimemElement>(
    dev: &DevComm<LsaMultimem>,
    x: &Window<T>,
    bias: &[T],
    residual: &[T],
    out: &mut [T],
    n: usize,
    hidden: usize,
) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let sums = dev.lsa_multimem(x);
    let stride = grid_size_1d();
    let mut i = index_1d();
    let mut c = i % hidden;
    let step = stride % hidden;
    while i < n {
        let sum = sums.load_reduce_sum(i).to_f32() + bias[c].to_f32() + residual[i].to_f32();
        out[i] = T::from_f32(sum);
        i += stride;
        c += step;
        if c >= hidden {
            c -= hidden;
        }
    }
    bar.sync(Cta, Order::Release);
}
