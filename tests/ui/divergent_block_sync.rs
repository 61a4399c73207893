// Block-wide syncs that not every thread of the block reaches: on the GPU each is undefined behaviour or a hang
// (the threads that skip it leave the others waiting, or pair with a different sync). Each is refused where it is
// written, naming what makes the control flow around it differ between threads.
#![forbid(unsafe_code)]

use weft::prelude::*;

// Only thread 0 syncs.
#[weft::kernel]
pub fn only_thread_zero(dev: &DevComm<Lsa>, out: &mut [u32]) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    if thread_idx_x() == 0 {
        bar.sync(Cta, Order::Relaxed);
    }
    bar.end();
    out[0] = 1;
}

// The threads past `n` have left.
#[weft::kernel]
pub fn after_an_early_return(out: &mut [u32], n: u32) {
    if thread_idx_x() >= n {
        return;
    }
    sync_threads();
    out[thread_idx_x() as usize] = 1;
}

// Each thread loops a different number of times.
#[weft::kernel]
pub fn loop_trip_count_per_thread(dev: &DevComm<Lsa>, rounds: &[u32]) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    for _ in 0..rounds[thread_idx_x() as usize] {
        bar.sync(Cta, Order::AcqRel);
    }
    bar.end();
}

// A grid-stride loop: the threads past the end of `out` run one iteration fewer.
#[weft::kernel]
pub fn in_a_grid_stride_loop(out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = block_reduce_sum(out[i]);
    }
}

// While a value read from memory says so: another thread may see another value.
#[weft::kernel]
pub fn while_over_data(flags: &[u32], out: &mut [u32]) {
    let mut i = 0;
    while flags[i] != 0 {
        sync_threads();
        i += 1;
    }
    out[0] = i as u32;
}

// A local set by one thread, then tested by all.
#[weft::kernel]
pub fn through_a_local(out: &mut [u32]) {
    let mut leader = false;
    if lane_id() == 0 {
        leader = true;
    }
    if leader {
        sync_threads();
    }
    out[0] = 1;
}

fn main() {}
