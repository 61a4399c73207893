// Every method of every vocabulary type, in kernels rustc and the macro accept: tests/ui.rs builds this file, and
// macros/tests/nvcc.rs compiles its kernels' C++ with nvcc against both NCCL releases ("accepted means it
// compiles"). The items NCCL 2.28 lacks are in vocabulary_2_32.rs.

use weft::prelude::*;

#[weft::kernel]
pub fn communicator_teams_windows(dev: &DevComm<Lsa>, w: &Window<f32>, x: &[f32], out: &mut [f32], n: usize) {
    let world = dev.world();
    let lsa = dev.lsa();
    let rail = dev.rail();
    let inner = world.inner_factor(1);
    let outer = world.outer_factor(1);
    let ranks = dev.rank() + dev.nranks() + dev.lsa_rank() + dev.lsa_size();
    let mapped = world.rank_from(rail, 0) + dev.team_rank_to_world(lsa, 0) + dev.team_rank_to_lsa(world, 0);
    let fields = inner.nranks + outer.rank + world.stride;
    let member = lsa.contains(world, ranks % world.nranks);
    let tail = w.offset(1);
    let local = w.local();
    let peer = w.lsa(dev.lsa_rank());
    let other = w.peer(world, 0);
    if w.is_empty() || tail.is_empty() || local.is_empty() || peer.is_empty() || other.is_empty() || x.is_empty() {
        return;
    }
    let lengths = w.len() + tail.len() + local.len() + peer.len() + other.len() + x.len() + out.len();
    for i in grid_stride(n) {
        out[i] = local[i] + peer[i] + other[i] + x[i] + (mapped + fields + lengths as u32) as f32;
    }
    if member {
        dev.lsa_reduce_sum(Cta, w, out, n);
        dev.lsa_copy(Warp, x, w, n);
        dev.lsa_reduce_sum_copy(Cta, w, &tail, n);
    }
}

#[weft::kernel]
pub fn barriers_and_coops(dev: &DevComm<Lsa>, flags: &mut [u32]) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.arrive(Cta, Order::Release);
    bar.wait(Cta, Order::Acquire);
    bar.sync(Cta, Order::AcqRel);
    let waited = bar.wait_timeout(Cta, Order::Acquire, 1000);
    let synced = bar.sync_timeout(Cta, Order::AcqRel, 1000);
    let code = if waited.is_ok() {
        0
    } else if synced.is_timed_out() {
        1
    } else if synced.is_aborted() {
        2
    } else {
        3
    };
    bar.end();
    let warp_bar = dev.lsa_barrier(Warp, 0);
    warp_bar.sync(Warp, Order::Relaxed);
    warp_bar.end();
    let lanes = Lanes::from_mask(0xffff_ffff);
    let active = Lanes::coalesced();
    let span = WarpSpan::from_warps(0, 1, 1);
    let shapes = lanes.mask() + active.size() + active.thread_rank() + span.first_warp() + span.warp_count() + span.id();
    let ranks = span.size() + span.thread_rank() + Thread.size() + Thread.thread_rank() + Warp.size() + Cta.size();
    Thread.sync();
    Warp.sync();
    lanes.sync();
    span.sync();
    Cta.sync();
    flags[block_idx_x() as usize] = code + shapes + ranks + Warp.thread_rank() + Cta.thread_rank();
}

#[weft::kernel]
pub fn gin_session(dev: &DevComm<LsaGin>, src: &Window<f32>, dst: &Window<f32>, count: usize, out: &mut [u64]) {
    let gin = dev.gin(0);
    let world = dev.world();
    let peer = (dev.rank() + 1) % dev.nranks();
    gin.put(world, peer, dst, src, count, SignalInc(0), CounterInc(0), Cta);
    gin.put(world, peer, dst, src, count, SignalAdd(1, 2), NoAction, Warp);
    gin.put_value(world, peer, dst, 1.5, NoAction, Thread);
    gin.signal(world, peer, SignalInc(1), Cta);
    gin.flush(Cta, Order::Release);
    gin.wait_signal(Cta, 0, 1);
    let timed = gin.wait_signal_timeout(Cta, 1, 2, 1000);
    gin.wait_counter(Cta, 0, 1);
    let counted = gin.wait_counter_timeout(Cta, 0, 1, 1000);
    out[0] = gin.read_signal(0) + gin.read_counter(0) + gin.signal_shadow(0);
    gin.increase_signal_shadow(0, 1);
    gin.wait_signal_meet_shadow(Cta, 0);
    gin.reset_signal(0);
    gin.reset_counter(0);
    let rail = gin.rail_barrier(Cta, block_idx_x());
    rail.sync(Cta, Order::AcqRel);
    let railed = rail.sync_timeout(Cta, Order::AcqRel, 1000);
    rail.end();
    let hybrid = dev.hybrid_barrier(Cta, &gin, 0);
    hybrid.sync(Cta, Order::AcqRel);
    hybrid.end();
    out[1] = if timed.is_ok() && counted.is_ok() && railed.is_ok() { 1 } else { 0 };
}

#[weft::kernel(types(f32, bf16))]
pub fn packs_shared_all_to_all<T: Float>(
    dev: &DevComm<Lsa>,
    w: &Window<T>,
    x: &[T],
    y: &mut [T],
    master: &mut [f32],
    h: LlA2aHandle,
) {
    let p = x.load_pack(0);
    let wide = p.widen();
    let first = p.lane(0);
    y.store_pack(0, wide.narrow());
    let mut view = w.local();
    view.store_pack(1, view.load_pack(0));
    let m = master.load_wide::<T>(0);
    master.store_wide(0, m.sqrt().mul_add(m, m) * 2.0 + WidePack::<T>::splat(1.0));
    let sum = wide.lane(0) + wide.lane_sum() + m.rsqrt().lane(1);
    let mut tile = SharedArray::<T, 64>::new();
    tile[0] = first;
    tile.as_mut_slice()[1] = first;
    let shared = tile.as_slice().len() + tile.len();
    let a2a = dev.ll_a2a(Warp, h, block_idx_x(), 4);
    a2a.send(0, 0, first);
    a2a.broadcast(1, sum);
    let got = a2a.recv::<T>(0);
    a2a.end_epoch(Warp);
    a2a.end();
    y.store_pack(1, Pack::<T>::splat(got));
    let handle = h.slots() + h.buffer();
    if !tile.is_empty() {
        y[0] = T::from_f32(sum + (shared as u32 + handle) as f32) + got + Pack::splat(got).lane(0);
    }
}

#[weft::kernel]
pub fn multimem(dev: &DevComm<LsaMultimem>, w: &Window<f32>, x: &[f32], out: &mut [f32], n: usize) {
    let mv = dev.lsa_multimem(w);
    let i = index_1d();
    if i < mv.len() && !mv.is_empty() {
        out[i] = mv.load_reduce_sum(i);
        mv.reduce_add(i, 1.0);
        mv.store(i, 2.0);
    }
    dev.multimem_reduce_sum(Cta, w, out, n);
    dev.multimem_copy(Cta, x, w, n);
    dev.multimem_reduce_sum_copy(Cta, w, w, n);
    let bar = dev.lsa_multimem_barrier(Cta, 0);
    bar.sync(Cta, Order::AcqRel);
    bar.end();
}

fn main() {
    // What the kernels imply, checked where rustc runs them.
    assert!(gin_session::CAPABILITIES.gin);
    assert!(multimem::CAPABILITIES.multimem);
    assert_eq!(packs_shared_all_to_all::ENTRY_POINTS, ["rs_packs_shared_all_to_all__f32", "rs_packs_shared_all_to_all__bf16"]);
}

// A `TmaMatrix` is lent to device fns by reference (it stays the kernel's parameter, where TMA reads its map).
#[weft::device_fn]
pub fn tma_columns(b: &TmaMatrix<bf16>) -> usize {
    b.cols()
}

// The persistent TMA GEMM: a matrix's shape, the loop, and a thread's share of each tile.
#[weft::kernel(launch_bounds(384, 1))]
pub fn tma_gemm_tiles(a: TmaMatrix<bf16>, b: TmaMatrix<bf16>, out: &mut [f32]) {
    let n = tma_columns(&b) + a.rows() * 0;
    let mut gemm = a.gemm_tiles(&b);
    while gemm.next_tile() {
        if gemm.is_empty() {
            return;
        }
        let mut i = 0;
        while i < gemm.len() {
            out[(gemm.row0() + gemm.row(i)) * n + gemm.col0() + gemm.col(i)] = gemm.value(i);
            i += 1;
        }
    }
}

// Values changed in place, then the tile stored whole, into a slice and into the owner's window over LSA.
#[weft::kernel(launch_bounds(384, 1))]
pub fn tma_gemm_store(dev: &DevComm<Lsa>, a: TmaMatrix<bf16>, b: TmaMatrix<bf16>, out: &mut [bf16], w: &Window<bf16>) {
    let n = b.cols();
    let mut gemm = a.gemm_tiles(&b);
    while gemm.next_tile() {
        for i in 0..gemm.len() {
            let v = gemm.value(i);
            gemm.set_value(i, v * 2.0);
        }
        out.gemm_store(&gemm, gemm.row0(), gemm.col0(), n);
        // A slot of rows elsewhere: the first 128 rows of the peer's window.
        w.lsa(dev.lsa_size() - 1).gemm_store(&gemm, 0, gemm.col0(), n);
    }
    // The walk again, tile by tile (a reduce-scatter's second pass).
    let mut t = block_idx_x() as usize;
    while t < gemm.tiles() {
        out[gemm.tile_row0(t) * n + gemm.tile_col0(t)] = bf16::from_f32(0.0);
        t += grid_dim_x() as usize;
    }
}

// A matrix sharded over the LSA team, one map per rank: its shape, lent to a device fn, and the same loop.
#[weft::device_fn]
pub fn shard_of(x: &TmaShards<bf16>) -> usize {
    x.shard_rows()
}

#[weft::kernel(launch_bounds(384, 1))]
pub fn tma_shards_gemm_tiles(dev: &DevComm<Lsa>, x: TmaShards<bf16>, w: TmaMatrix<bf16>, out: &mut [bf16]) {
    let start = dev.lsa_barrier(Cta, block_idx_x());
    start.sync(Cta, Order::Acquire);
    start.end();
    let n = w.cols() + (x.rows() + x.cols() + shard_of(&x)) * 0;
    let mut gemm = x.gemm_tiles(&w);
    while gemm.next_tile() {
        out.gemm_store(&gemm, gemm.row0(), gemm.col0(), n);
    }
}
