// Collectives under control flow every thread of the block (or warp) shares compile: conditions on parameters,
// block indices and grid sizes, loops over them, the outcome of a bounded wait (shared by its coop), a warp's index
// for warp-wide collectives, an early exit every thread takes, and a device fn with a sync called by every thread.
#![forbid(unsafe_code)]
#![deny(warnings)]

use weft::prelude::*;

#[weft::device_fn]
pub fn publish(out: &mut [f32], value: f32) {
    sync_threads();
    out[0] = value;
}

#[weft::kernel]
pub fn uniform(dev: &DevComm<Lsa>, out: &mut [f32], rounds: u32, n: u32) {
    if block_idx_x() >= n {
        return;
    }
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    for _ in 0..rounds {
        bar.sync(Cta, Order::AcqRel);
    }
    let mut row = block_idx_x();
    while row < n {
        let total = block_reduce_sum(out[row as usize]);
        if total > 0.0 {
            sync_threads();
        }
        row += grid_dim_x();
    }
    if bar.sync_timeout(Cta, Order::AcqRel, 1_000_000).is_ok() {
        bar.sync(Cta, Order::Release);
    }
    if warp_id() == 0 {
        let v = warp_reduce_sum(out[lane_id() as usize]);
        sync_warp();
        out[0] = v;
    }
    publish(out, 1.0);
    bar.end();
}

fn main() {}
