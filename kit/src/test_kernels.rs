//! Kernels the GPU tests launch (besides the examples' kernels, which they reuse); `tests/codegen.rs` compiles
//! every one of them with nvcc against each NCCL release's headers.

use weft::prelude::*;

pub mod gin;

/// Copies the window of the next LSA peer (itself, with one rank) into `out`.
#[weft::kernel(types(f32, bf16))]
pub fn copy_from_next_peer<T: Float>(dev: &DevComm<Lsa>, src: &Window<T>, out: &mut [T], n: usize) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let peer = (dev.lsa_rank() + 1) % dev.lsa_size();
    for i in grid_stride(n) {
        out[i] = src.lsa(peer)[i];
    }
    bar.sync(Cta, Order::Release);
}

/// `rounds` barrier round trips per block; each block records how many it completed.
#[weft::kernel]
pub fn barrier_round_trips(dev: &DevComm<Lsa>, rounds: u32, done: &mut [u32]) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    let mut completed = 0u32;
    while completed < rounds {
        bar.sync(Cta, Order::AcqRel);
        completed += 1;
    }
    if thread_idx_x() == 0 {
        done[block_idx_x() as usize] = completed;
    }
}

/// Syncs on LSA barrier `first + block_idx_x()` under a declared count of 4 and records, per block, that it did: the
/// index is computed, so no `requirements(&cfg)` covers it, and `launch` checks it against the count on the device
/// (the GPU bounds tests make it fail on purpose with `first = 4`).
#[weft::kernel(lsa_barriers = 4)]
pub fn barrier_at(dev: &DevComm<Lsa>, first: u32, done: &mut [u32]) {
    let bar = dev.lsa_barrier(Cta, first + block_idx_x());
    bar.sync(Cta, Order::AcqRel);
    if thread_idx_x() == 0 {
        done[block_idx_x() as usize] = first + block_idx_x();
    }
}

/// Writes into the local part of a window through its LSA view, scaled: `x[i] = scale * i`.
#[weft::kernel]
pub fn fill_window(x: &Window<f32>, scale: f32, n: usize) {
    for i in grid_stride(n) {
        x.local()[i] = scale * (i as f32);
    }
}

/// Copies the local part of one window into the local part of another: a kernel with two windows and no device
/// communicator (the launch requires both of one communicator).
#[weft::kernel]
pub fn copy_window(src: &Window<f32>, dst: &Window<f32>, n: usize) {
    for i in grid_stride(n) {
        dst.local()[i] = src.local()[i];
    }
}

/// Waits on an LSA barrier with a deadline and records the outcome per block: 0 ok, 1 timed out, 2 aborted.
#[weft::kernel]
pub fn barrier_wait_with_deadline(dev: &DevComm<Lsa>, timeout_ns: u64, outcome: &mut [u32]) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    let result = bar.sync_timeout(Cta, Order::AcqRel, timeout_ns);
    if thread_idx_x() == 0 {
        let code = if result.is_ok() {
            0u32
        } else if result.is_timed_out() {
            1u32
        } else {
            2u32
        };
        outcome[block_idx_x() as usize] = code;
    }
}

/// A GIN put + signal to the next rank: compiles everywhere, runs only where the communicator has GIN.
#[weft::kernel]
pub fn gin_ring_put(dev: &DevComm<LsaGin>, src: &Window<f32>, dst: &Window<f32>, n: usize) {
    let gin = dev.gin(0);
    let next = (dev.rank() + 1) % dev.nranks();
    if block_idx_x() == 0 {
        gin.put(dev.world(), next, dst, src, n, SignalInc(0), NoAction, Cta);
        gin.flush(Cta, Order::Release);
    }
}

/// `out[i] = a * x[offset + i] + y[i]` for `i < n`, 16 bytes per load and store, then the elements that do not fill
/// a pack; `squares[p]` is the sum of squares of out's pack `p` (in f32, before rounding). Through a sub-slice of
/// `x` that starts `offset` elements in, so an offset that is not a multiple of the pack takes the unaligned path.
#[weft::kernel(types(f32, bf16))]
#[allow(clippy::too_many_arguments)]
pub fn pack_axpy<T: Float>(a: f32, x: &[T], offset: usize, y: &[T], out: &mut [T], squares: &mut [f32], n: usize) {
    let xs = &x[offset..offset + n];
    let lanes = pack_lanes::<T>();
    for p in grid_stride(n / lanes) {
        let v = xs.load_pack(p).widen() * a + y.load_pack(p).widen();
        out.store_pack(p, v.narrow());
        squares[p] = (v * v).lane_sum();
    }
    let done = n / lanes * lanes;
    for i in grid_stride(n - done) {
        out[done + i] = T::from_f32(a * xs[done + i].to_f32() + y[done + i].to_f32());
    }
}

/// `out[i] = w[offset + i]` for `i < n` (n a whole number of packs), 16 bytes at a time, through the local view of
/// the window `offset` elements in: an offset that is not a multiple of the pack takes the unaligned path.
#[weft::kernel(types(f32, bf16))]
pub fn pack_window_copy<T: Float>(w: &Window<T>, offset: usize, out: &mut [T], n: usize) {
    let shifted = w.offset(offset);
    let view = shifted.local();
    for p in grid_stride(n / pack_lanes::<T>()) {
        out.store_pack(p, view.load_pack(p));
    }
}

/// `out[i] = value`, compiled with `__launch_bounds__(128, 4)`: launched with more than 128 threads per block it
/// fails with weft's error, before CUDA would refuse it.
#[weft::kernel(launch_bounds(128, 4))]
pub fn bounded_fill(out: &mut [f32], value: f32, n: usize) {
    for i in grid_stride(n) {
        out[i] = value;
    }
}

/// `out[i] = x[idx[i]]` for `i < n`: the index into `x` is data, so no launch-time check can bound it and `launch`
/// checks it on the device (the GPU bounds tests make it fail on purpose).
#[weft::kernel]
pub fn gather(x: &[f32], idx: &[u32], out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = x[idx[i] as usize];
    }
}

/// `out[i] = value` for `i < n`, then lets a programmatic dependent start (PDL's producer side).
#[weft::kernel]
pub fn pdl_producer(out: &mut [u32], value: u32, n: usize) {
    for i in grid_stride(n) {
        out[i] = value;
    }
    pdl_launch_dependents();
}

/// `out[i] = input[i] + 1` for `i < n`, reading `input` only after `pdl_wait()` (PDL's consumer side: launched
/// with `LaunchConfig::programmatic()` after the kernel that writes `input`).
#[weft::kernel]
pub fn pdl_consumer(input: &[u32], out: &mut [u32], n: usize) {
    pdl_wait();
    for i in grid_stride(n) {
        out[i] = input[i] + 1;
    }
    pdl_launch_dependents();
}

/// `out[i] = value + (i % 7)` for `i < n`, written only after `pdl_wait()` (the previous kernel on the stream may
/// still read `out`), then lets a programmatic dependent start: the producer of the fused all-reduce's input in the
/// PDL chain of tests/gpu_pdl.rs.
#[weft::kernel(types(f32, bf16))]
pub fn pdl_fill<T: Float>(out: &mut [T], value: f32, n: usize) {
    pdl_wait();
    for i in grid_stride(n) {
        out[i] = T::from_f32(value + (i % 7) as f32);
    }
    pdl_launch_dependents();
}

/// `out (m x n, f32) = a (m x k) * b (k x n)`, row-major, through tensor cores (`mma.sync m16n8k16`): one warp per
/// 16 x 8 output tile, grid-stride over the tiles. `m` a multiple of 16, `n` of 8, `k` of 16 (a tile outside the
/// buffers stops the kernel: the fragment loads and stores check their tiles on the device).
#[weft::kernel(types(f16, bf16))]
pub fn mma_gemm<T: MmaElement>(a: &[T], b: &[T], out: &mut [f32], m: usize, n: usize, k: usize) {
    // The warp's own index: `mma` needs every lane of the warp, so the loop over tiles is decided per warp.
    let per_block = (block_dim_x() * block_dim_y() * block_dim_z() / 32) as usize;
    let warp = block_idx_x() as usize * per_block + warp_id() as usize;
    let warps = grid_dim_x() as usize * per_block;
    let tiles_n = n / 8;
    let tiles = (m / 16) * tiles_n;
    let mut t = warp;
    while t < tiles {
        let row0 = (t / tiles_n) * 16;
        let col0 = (t % tiles_n) * 8;
        let mut acc = MmaAcc::zero();
        let mut k0 = 0;
        while k0 < k {
            acc = mma(a.mma_load_a(row0, k0, k), b.mma_load_b(k0, col0, n), acc);
            k0 += 16;
        }
        out.mma_store(acc, row0, col0, n);
        t += warps;
    }
}

/// [`mma_gemm()`] through shared memory and `ldmatrix`: each 16 x 16 slice of `a` and 16 x 8 slice of `b` is copied
/// into a shared tile by the block's one warp (launch 32 threads per block), then loaded into fragments with one
/// `ldmatrix` each. Same shapes and result as [`mma_gemm()`].
#[weft::kernel(types(f16, bf16))]
pub fn mma_gemm_shared<T: MmaElement>(a: &[T], b: &[T], out: &mut [f32], m: usize, n: usize, k: usize) {
    let mut tile_a = SharedArray::<T, 256>::new();
    let mut tile_b = SharedArray::<T, 128>::new();
    let lane = thread_idx_x() as usize;
    let tiles_n = n / 8;
    let tiles = (m / 16) * tiles_n;
    let mut t = block_idx_x() as usize;
    while t < tiles {
        let row0 = (t / tiles_n) * 16;
        let col0 = (t % tiles_n) * 8;
        let mut acc = MmaAcc::zero();
        let mut k0 = 0;
        while k0 < k {
            let mut i = lane;
            while i < 256 {
                tile_a[i] = a[(row0 + i / 16) * k + k0 + i % 16];
                i += 32;
            }
            let mut j = lane;
            while j < 128 {
                tile_b[j] = b[(k0 + j / 8) * n + col0 + j % 8];
                j += 32;
            }
            sync_warp();
            acc = mma(tile_a.mma_ldmatrix_a(0, 0, 16), tile_b.mma_ldmatrix_b(0, 0, 8), acc);
            sync_warp();
            k0 += 16;
        }
        out.mma_store(acc, row0, col0, n);
        t += grid_dim_x() as usize;
    }
}

/// `out = a × b` (`m × k` by `k × n`, row-major, f16 or bf16, `out` in the same type, accumulated in f32), one
/// 128 × 128 tile per block and grid-stride over the tiles, through the block GEMM mainloop (`gemm_block`) and an
/// epilogue written here. `m` and `n` multiples of 128, `k` of 32; launch 256 threads per block.
///
/// Tiles are visited in groups of `GROUP` tile rows, column by column within a group, so that the blocks running at
/// once share both their rows of `a` and their columns of `b` in L2 (row by row, every wave would stream all of `b`
/// from memory once `b` outgrows L2).
#[weft::kernel(types(f16, bf16), launch_bounds(256, 2))]
pub fn gemm_tiles<T: MmaElement>(a: &[T], b: &[T], out: &mut [T], m: usize, n: usize, k: usize) {
    let group = 8;
    let tiles_m = m / 128;
    let tiles_n = n / 128;
    let tiles = tiles_m * tiles_n;
    let mut t = block_idx_x() as usize;
    while t < tiles {
        let first_row = (t / (group * tiles_n)) * group;
        let rows = min(group, tiles_m - first_row);
        let within = t % (group * tiles_n);
        let row0 = (first_row + within % rows) * 128;
        let col0 = (within / rows) * 128;
        let tile = a.gemm_block(row0, k, b, col0, n, k);
        let mut i = 0;
        while i < tile.len() {
            out[(row0 + tile.row(i)) * n + col0 + tile.col(i)] = T::from_f32(tile.value(i));
            i += 1;
        }
        t += grid_dim_x() as usize;
    }
}

/// `out (m x n) = a (m x k) * b (k x n)`, row-major, f32 accumulate, rounded once: the persistent Hopper loop
/// (`a.gemm_tiles(&b)`: TMA loads by a producer warpgroup, `m64n256k16` by two consumer warpgroups, 128 x 256 tiles)
/// with the epilogue written here. `m` a multiple of 128, `n` of 256, `k` of 64; launch with
/// `weft::host::launch::gemm_tiles_config(stream, m, n)`, operands made with `TmaOperand::gemm_a` and `gemm_b`.
#[weft::kernel(types(f16, bf16), launch_bounds(384, 1))]
pub fn gemm_tma<T: MmaElement>(a: TmaMatrix<T>, b: TmaMatrix<T>, out: &mut [T]) {
    let n = b.cols();
    let mut gemm = a.gemm_tiles(&b);
    while gemm.next_tile() {
        let (row0, col0) = (gemm.row0(), gemm.col0());
        let mut i = 0;
        while i < gemm.len() {
            out[(row0 + gemm.row(i)) * n + col0 + gemm.col(i)] = T::from_f32(gemm.value(i));
            i += 1;
        }
    }
}

/// [`gemm_tma()`] with the epilogue most GEMMs want: each tile scaled in place (`gemm.set_value`), then written by
/// `out.gemm_store(&gemm, gemm.row0(), gemm.col0(), n)`: two values per 4-byte store and one bounds check per tile,
/// where the loop of [`gemm_tma()`] stores one 2-byte value at a time and checks each. `out = alpha · a × b`, same
/// shapes and launch.
#[weft::kernel(types(f16, bf16), launch_bounds(384, 1))]
pub fn gemm_tma_store<T: MmaElement>(a: TmaMatrix<T>, b: TmaMatrix<T>, out: &mut [T], alpha: f32) {
    let n = b.cols();
    let mut gemm = a.gemm_tiles(&b);
    while gemm.next_tile() {
        for i in 0..gemm.len() {
            let scaled = alpha * gemm.value(i);
            gemm.set_value(i, scaled);
        }
        out.gemm_store(&gemm, gemm.row0(), gemm.col0(), n);
    }
}

/// Every kernel's name and generated CUDA C++, for the codegen test.
/// `out[i] = x[i]` (tests/gpu_streams.rs: uses of one buffer on several streams).
#[weft::kernel]
pub fn copy_f32(x: &[f32], out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = x[i];
    }
}

/// `out[i] = value` (tests/gpu_streams.rs).
#[weft::kernel]
pub fn fill_f32(out: &mut [f32], value: f32, n: usize) {
    for i in grid_stride(n) {
        out[i] = value;
    }
}

/// `x.local()[i] += y[i]`: writes its window while reading a slice (tests/gpu_streams.rs: the two may not be one
/// buffer).
#[weft::kernel]
pub fn add_into_window(x: &Window<f32>, y: &[f32], n: usize) {
    for i in grid_stride(n) {
        let sum = x.local()[i] + y[i];
        x.local()[i] = sum;
    }
}

/// One LL all-to-all round of one warp on one rank: sends `1.0` to slot 0 of LSA peer 0 (itself) and reads it back
/// (tests/gpu_streams.rs: the handle the device communicator made).
#[weft::kernel]
pub fn ll_a2a_round(dev: &DevComm<Lsa>, h: LlA2aHandle, out: &mut [f32]) {
    let a2a = dev.ll_a2a(Warp, h, 0, 1);
    a2a.send(0, 0, 1.0f32);
    let got = a2a.recv::<f32>(0);
    a2a.end_epoch(Warp);
    a2a.end();
    if thread_idx_x() == 0 && block_idx_x() == 0 {
        out[0] = got;
    }
}

pub const ALL: &[(&str, &str)] = &[
    (gemm_tma::NAME, gemm_tma::SOURCE),
    (gemm_tma_store::NAME, gemm_tma_store::SOURCE),
    (copy_from_next_peer::NAME, copy_from_next_peer::SOURCE),
    (barrier_round_trips::NAME, barrier_round_trips::SOURCE),
    (barrier_at::NAME, barrier_at::SOURCE),
    (fill_window::NAME, fill_window::SOURCE),
    (copy_window::NAME, copy_window::SOURCE),
    (barrier_wait_with_deadline::NAME, barrier_wait_with_deadline::SOURCE),
    (gin_ring_put::NAME, gin_ring_put::SOURCE),
    (pack_axpy::NAME, pack_axpy::SOURCE),
    (pack_window_copy::NAME, pack_window_copy::SOURCE),
    (bounded_fill::NAME, bounded_fill::SOURCE),
    (gather::NAME, gather::SOURCE),
    (pdl_producer::NAME, pdl_producer::SOURCE),
    (pdl_consumer::NAME, pdl_consumer::SOURCE),
    (pdl_fill::NAME, pdl_fill::SOURCE),
    (mma_gemm::NAME, mma_gemm::SOURCE),
    (mma_gemm_shared::NAME, mma_gemm_shared::SOURCE),
    (gemm_tiles::NAME, gemm_tiles::SOURCE),
    (gin::gin_put_everywhere::NAME, gin::gin_put_everywhere::SOURCE),
    (gin::gin_put_value_ring::NAME, gin::gin_put_value_ring::SOURCE),
    (gin::gin_barrier_rounds::NAME, gin::gin_barrier_rounds::SOURCE),
    (gin::hybrid_allreduce::NAME, gin::hybrid_allreduce::SOURCE),
    (gin::gin_put_then_wait_with_deadline::NAME, gin::gin_put_then_wait_with_deadline::SOURCE),
    (gin::gin_wait_with_deadline::NAME, gin::gin_wait_with_deadline::SOURCE),
    (copy_f32::NAME, copy_f32::SOURCE),
    (fill_f32::NAME, fill_f32::SOURCE),
    (add_into_window::NAME, add_into_window::SOURCE),
    (ll_a2a_round::NAME, ll_a2a_round::SOURCE),
];
