// Warp-wide collectives that not every lane reaches, a session left on some threads only, and a device fn with a
// block-wide sync called by some threads only: each refused where it is written.
#![forbid(unsafe_code)]

use weft::prelude::*;

// Half a warp shuffles.
#[weft::kernel]
pub fn half_a_warp_shuffles(out: &mut [f32]) {
    let lane = lane_id();
    if lane < 16 {
        out[lane as usize] = shfl_xor(out[lane as usize], 1);
    }
}

// Thread 0 leaves while the session is open: its end (a block-wide sync) runs on thread 0 alone.
#[weft::kernel]
pub fn leaves_an_open_session(dev: &DevComm<Lsa>, out: &mut [u32]) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Relaxed);
    if thread_idx_x() == 0 {
        return;
    }
    out[thread_idx_x() as usize] = 1;
}

#[weft::device_fn]
pub fn publish(out: &mut [u32]) {
    sync_threads();
    out[0] = 1;
}

// The device fn syncs the block; only thread 0 calls it (a constant assertion in the kernel's module, at the call).
#[weft::kernel]
pub fn calls_a_syncing_device_fn(out: &mut [u32]) {
    if thread_idx_x() == 0 {
        publish(out);
    }
}

fn main() {}
