// Barrier sessions moved or reassigned (Rust allows it): C++ can neither copy nor move one, so each of these failed in nvcc.

use weft::prelude::*;

#[weft::device_fn]
pub fn finish(bar: LsaBarrier<'_, Cta>) {
    bar.sync(Cta, Order::Release);
    bar.end();
}

#[weft::kernel]
pub fn publish(dev: &DevComm<Lsa>, out: &mut [f32], n: usize) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    for i in grid_stride(n) {
        out[i] = 1.0;
    }
    let moved = bar;
    finish(moved);
    let mut again = dev.lsa_barrier(Cta, 0);
    again.end();
    again = dev.lsa_barrier(Cta, 1);
    again.end();
}

fn main() {}
