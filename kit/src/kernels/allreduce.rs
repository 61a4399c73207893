//! The quickstart's kernel: a one-shot all-reduce over the LSA team (every GPU reachable by load/store).

use weft::prelude::*;

/// Every rank reads every LSA peer's window and writes the sum to `out`: 16 bytes per load and store
/// ([`Pack`]s, summed in `f32`), then the last `n % pack_lanes::<T>()` elements one per thread. One LSA barrier
/// per block: the first sync makes sure every peer's input is in place, the second that no peer still reads ours.
#[weft::kernel(types(f32, bf16))]
pub fn lsa_allreduce<T: Float>(dev: &DevComm<Lsa>, x: &Window<T>, out: &mut [T], n: usize) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Relaxed);
    let lanes = pack_lanes::<T>();
    let packs = n / lanes;
    for p in grid_stride(packs) {
        let mut acc = WidePack::<T>::splat(0.0);
        for peer in 0..dev.lsa_size() {
            acc += x.lsa(peer).load_pack(p).widen();
        }
        out.store_pack(p, acc.narrow());
    }
    for t in grid_stride(n - packs * lanes) {
        let i = packs * lanes + t;
        let mut acc: f32 = 0.0;
        for peer in 0..dev.lsa_size() {
            acc += x.lsa(peer)[i].to_f32();
        }
        out[i] = T::from_f32(acc);
    }
    bar.sync(Cta, Order::Release);
}
