//! GIN kernels the GPU tests launch (tests/gpu_gin.rs): puts with signals and counters, put_value with a signal
//! addition, rail GIN barriers, and a hybrid LSA + GIN all-reduce. They run where the communicator has GIN (on one
//! machine: weft's loopback backend, docs/gin.md).

use weft::prelude::*;

/// Every rank puts its `chunk` elements into slot `me` of every other rail rank's `inbox`, raising signal 0 there
/// and counter 0 here; it waits until all `n - 1` chunks have arrived and all its puts' sources are free, and reports
/// the signal and the counter.
#[weft::kernel]
pub fn gin_put_everywhere(dev: &DevComm<Gin>, inbox: &Window<f32>, src: &Window<f32>, chunk: usize, seen: &mut [u64]) {
    let gin = dev.gin(0);
    let rail = dev.rail();
    let (me, n) = (rail.rank, rail.nranks);
    let mut step: u32 = 1;
    while step < n {
        let slot = inbox.offset(me as usize * chunk);
        gin.put(rail, (me + step) % n, &slot, src, chunk, SignalInc(0), CounterInc(0), Cta);
        step += 1;
    }
    gin.wait_signal(Cta, 0, (n - 1) as u64);
    gin.wait_counter(Cta, 0, (n - 1) as u64);
    gin.flush(Cta, Order::Release);
    if thread_idx_x() == 0 {
        seen[0] = gin.read_signal(0);
        seen[1] = gin.read_counter(0);
    }
}

/// Every rank writes `1000 · (rank + 1)` into the next rail rank's `cell` and adds `rank + 1` to its signal 1; it
/// waits for its predecessor's addition and reports the signal.
#[weft::kernel]
pub fn gin_put_value_ring(dev: &DevComm<Gin>, cell: &Window<u64>, seen: &mut [u64]) {
    let gin = dev.gin(0);
    let rail = dev.rail();
    let (me, n) = (rail.rank, rail.nranks);
    let from = (me + n - 1) % n;
    gin.put_value(rail, (me + 1) % n, cell, (me as u64 + 1) * 1000, SignalAdd(1, me as u64 + 1), Cta);
    gin.wait_signal(Cta, 1, from as u64 + 1);
    gin.flush(Cta, Order::Release);
    if thread_idx_x() == 0 {
        seen[0] = gin.read_signal(1);
    }
}

/// `rounds` rail GIN barriers, each bounded by `timeout_ns`: `seen[0]` counts the ones every rank reached in time.
#[weft::kernel]
pub fn gin_barrier_rounds(dev: &DevComm<Gin>, rounds: u32, timeout_ns: u64, seen: &mut [u64]) {
    let gin = dev.gin(0);
    let bar = gin.rail_barrier(Cta, 0);
    let mut passed: u64 = 0;
    let mut round: u32 = 0;
    while round < rounds {
        if bar.sync_timeout(Cta, Order::AcqRel, timeout_ns).is_ok() {
            passed += 1;
        }
        round += 1;
    }
    bar.end();
    if thread_idx_x() == 0 {
        seen[0] = passed;
    }
}

/// A two-level all-reduce of `n` elements: the sum over this rank's LSA team by loads from the peers' `x`, then
/// the LSA sums of the other rails exchanged with GIN puts into `parts` (slot = rail rank), then the total.
#[weft::kernel]
pub fn hybrid_allreduce(dev: &DevComm<LsaGin>, x: &Window<f32>, parts: &Window<f32>, out: &mut [f32], n: usize) {
    let gin = dev.gin(0);
    let rail = dev.rail();
    let (me, rails) = (rail.rank, rail.nranks);
    let bar = dev.lsa_barrier(Cta, 0);
    bar.sync(Cta, Order::Relaxed);
    // This rail rank's slot of parts: the sum over the LSA team.
    let mut mine = parts.local();
    let mut i = thread_idx_x() as usize;
    while i < n {
        let mut sum = 0.0f32;
        for peer in 0..dev.lsa_size() {
            sum += x.lsa(peer)[i];
        }
        mine[me as usize * n + i] = sum;
        i += block_dim_x() as usize;
    }
    threadfence_system();
    Cta.sync();
    let mut step: u32 = 1;
    while step < rails {
        let slot = parts.offset(me as usize * n);
        gin.put(rail, (me + step) % rails, &slot, &slot, n, SignalInc(0), NoAction, Cta);
        step += 1;
    }
    gin.wait_signal(Cta, 0, (rails - 1) as u64);
    gin.flush(Cta, Order::Release);
    let all = parts.local();
    let mut j = thread_idx_x() as usize;
    while j < n {
        let mut total = 0.0f32;
        for r in 0..rails {
            total += all[r as usize * n + j];
        }
        out[j] = total;
        j += block_dim_x() as usize;
    }
    bar.sync(Cta, Order::Release);
}

/// Puts `count` elements to the next rail rank (raising its signal 0), then waits, bounded by `timeout_ns`, until
/// signal 0 here reaches `least`: `outcome[0]` is 0 when it did, 1 when the wait timed out (a peer that never
/// signals), 2 when the communicator was aborted (NCCL 2.32+ headers report it).
#[weft::kernel]
pub fn gin_put_then_wait_with_deadline(
    dev: &DevComm<Gin>,
    dst: &Window<f32>,
    src: &Window<f32>,
    count: usize,
    least: u64,
    timeout_ns: u64,
    outcome: &mut [u32],
) {
    let gin = dev.gin(0);
    let rail = dev.rail();
    if count > 0 {
        gin.put(rail, (rail.rank + 1) % rail.nranks, dst, src, count, SignalInc(0), NoAction, Cta);
    }
    let result = gin.wait_signal_timeout(Cta, 0, least, timeout_ns);
    gin.flush(Cta, Order::Release);
    if thread_idx_x() == 0 {
        outcome[0] = if result.is_ok() {
            0u32
        } else if result.is_timed_out() {
            1u32
        } else {
            2u32
        };
    }
}

/// Waits, bounded by `timeout_ns`, until signal 0 here reaches `least`; `outcome[0]` as in
/// [`gin_put_then_wait_with_deadline()`]. No windows: the fault tests' waiting ranks need nothing else.
#[weft::kernel]
pub fn gin_wait_with_deadline(dev: &DevComm<Gin>, least: u64, timeout_ns: u64, outcome: &mut [u32]) {
    let gin = dev.gin(0);
    let result = gin.wait_signal_timeout(Cta, 0, least, timeout_ns);
    if thread_idx_x() == 0 {
        outcome[0] = if result.is_ok() {
            0u32
        } else if result.is_timed_out() {
            1u32
        } else {
            2u32
        };
    }
}
