//! A ring all-gather over GIN (GPU-initiated networking): put + signal, one hop per step, across the rail team —
//! the ranks with the same local index on every node, the path between nodes. (Inside a node LSA is the faster
//! path; see the other kernels.)
//!
//! ```text
//! rail team of n ranks, this rank r, rank q's chunk at data[q·chunk .. (q+1)·chunk)
//! for step s in 0 .. n−1:
//!     put chunk (r − s) mod n to rank r+1, raising its signal 0 when the data has landed
//!     wait until signal 0 says chunk (r − s − 1) mod n has arrived here
//! ```
//!
//! The signal (GIN signal 0) counts chunks received over the kernel's whole life; its expected value lives in
//! NCCL's signal shadow (`increase_signal_shadow` by one thread, `wait_signal_meet_shadow` by the block), so
//! consecutive launches need no reset. A rail GIN barrier first makes sure every rank has its own chunk in place
//! and has finished with the previous round's data. One block: the steps are serial by nature.
//!
//! Needs a device communicator with GIN (`DevComm<Gin>`): on a machine without GIN the host's request for one
//! fails with a capability error before anything is launched.

use weft::prelude::*;

/// Ring all-gather of `chunk` elements per rail rank: `src` (this rank's chunk) ends up at
/// `data[rail.rank · chunk ..]` on every rank of the rail team, and `data` holds every rank's chunk in rail order.
/// Launch one block.
#[weft::kernel(len(src >= chunk))]
pub fn gin_ring_allgather(dev: &DevComm<Gin>, data: &Window<f32>, src: &[f32], chunk: usize) {
    let gin = dev.gin(0);
    let rail = dev.rail();
    let (me, n) = (rail.rank, rail.nranks);
    let next = (me + 1) % n;

    // This rank's own chunk, into place; visible to the NIC before anyone reads it.
    let mut mine = data.local();
    let mut i = thread_idx_x() as usize;
    while i < chunk {
        mine[me as usize * chunk + i] = src[i];
        i += block_dim_x() as usize;
    }
    threadfence_system();
    let bar = gin.rail_barrier(Cta, 0);
    bar.sync(Cta, Order::AcqRel);

    let mut step: u32 = 0;
    while step + 1 < n {
        // Forward the chunk that arrived last step (our own at step 0).
        let part = data.offset(((me + n - step) % n) as usize * chunk);
        gin.put(rail, next, &part, &part, chunk, SignalInc(0), NoAction, Cta);
        if thread_idx_x() == 0 {
            gin.increase_signal_shadow(0, 1);
        }
        gin.wait_signal_meet_shadow(Cta, 0);
        step += 1;
    }
    gin.flush(Cta, Order::Release);
}
