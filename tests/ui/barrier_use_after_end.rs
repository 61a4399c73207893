// `end()` consumes the barrier session: using it afterwards is a use-after-move.

use weft::prelude::*;

#[weft::kernel]
pub fn publish(dev: &DevComm<Lsa>, out: &mut [f32], n: usize) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    for i in grid_stride(n) {
        out[i] = 1.0;
    }
    bar.end();
    bar.sync(Cta, Order::Relaxed);
}

fn main() {}
