//! The quickstart's kernel: a one-shot all-reduce over the LSA team (every GPU reachable by load/store).

use weft::prelude::*;

/// Every rank reads element `i` of every LSA peer's window and writes the sum to `out[i]`. One LSA barrier per
/// block: the first sync makes sure every peer's input is in place, the second that no peer still reads ours.
#[weft::kernel(types(f32, bf16))]
pub fn lsa_allreduce<T: Float>(dev: &DevComm<Lsa>, x: &Window<T>, out: &mut [T], n: usize) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Relaxed);
    for i in grid_stride(n) {
        let mut acc = T::zero();
        for peer in 0..dev.lsa_size() {
            acc += x.lsa(peer)[i];
        }
        out[i] = acc;
    }
    bar.sync(Cta, Order::Release);
}
