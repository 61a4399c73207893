//! Tensor-parallel linear layers with their communication fused into the GEMM (issue 15's examples).
//!
//! [`allgather_gemm()`], the column-parallel linear: the activations `x` are sharded by rows over the LSA team (rank
//! `r` holds rows `r·m/R ..` in its window), and every rank computes `out = all_gather(x) × w` for its own column
//! slice `w` of the weights. Instead of gathering `x` into a local buffer first (`ncclAllGather`), each block's
//! 128 × 128 output tile reads its 128 rows of `x` straight from the owner's window over LSA, tile by tile as the
//! mainloop (`gemm_block`, device/src/gemm.rs) consumes them: no gathered copy is written or read back, and the
//! first tiles start as soon as the barrier says every shard is in place. Each rank walks the tiles starting with
//! the rows of its own shard, so that at any moment the ranks read different peers.
//!
//! [`gemm_reduce_scatter()`], the row-parallel linear: every rank multiplies its own `k` slice, and the sum over
//! ranks is scattered by rows. Instead of writing the whole partial product and reduce-scattering it
//! (`ncclReduceScatter`), each output tile goes straight from the registers into its owner's window, and each
//! owner sums what arrived.

use weft::prelude::*;

/// `out (m × n) = all_gather(x) (m × k) × w (k × n)`, row-major, f16 or bf16, accumulated in f32 and rounded once.
///
/// `x`: this rank's `m / R` rows (a symmetric window of `(m / R) × k` elements); `w`: this rank's `k × n` weights;
/// `out`: `m × n`. `m / R` and `n` multiples of 128, `k` of 32 (the mainloop's tile); 256 threads per block, the
/// same grid on every rank (LSA barrier `b` pairs block `b` of every rank). The first barrier makes every shard
/// readable; the second keeps each shard alive until no peer reads it.
#[weft::kernel(types(f16, bf16), len(w >= k * n, out >= m * n), launch_bounds(256, 2))]
pub fn allgather_gemm<T: MmaElement>(
    dev: &DevComm<Lsa>,
    x: &Window<T>,
    w: &[T],
    out: &mut [T],
    m: usize,
    n: usize,
    k: usize,
) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let ranks = dev.lsa_size() as usize;
    let shard = m / ranks;
    let tiles_n = n / 128;
    let tiles = (m / 128) * tiles_n;
    // Start at this rank's own rows: tile t of the walk is tile (t + first) of the matrix.
    let first = (dev.lsa_rank() as usize) * (shard / 128) * tiles_n;
    let mut t = block_idx_x() as usize;
    while t < tiles {
        let tile_index = (t + first) % tiles;
        let row0 = (tile_index / tiles_n) * 128;
        let col0 = (tile_index % tiles_n) * 128;
        let owner = row0 / shard;
        let tile = x.lsa(owner as u32).gemm_block(row0 - owner * shard, k, w, col0, n, k);
        let mut i = 0;
        while i < tile.len() {
            out[(row0 + tile.row(i)) * n + col0 + tile.col(i)] = T::from_f32(tile.value(i));
            i += 1;
        }
        t += grid_dim_x() as usize;
    }
    bar.sync(Cta, Order::Release);
}

/// The row-parallel linear with its reduce-scatter fused: `out = rows r·m/R .. (r+1)·m/R of Σ_ranks x × w`, each
/// rank holding its own `k` slice (`x`: `m × k`, `w`: `k × n`), f16 or bf16, accumulated in f32 and rounded once.
///
/// Each block computes output tiles of its rank's partial product and stores each straight into the window of the
/// rank that owns those rows, in this rank's slot (`scratch`: a symmetric f32 window of `m × n` elements per rank,
/// `R` slots of `m/R × n`). Every rank walks the tiles in the same order, block `b` taking tiles `b, b + grid, …`,
/// and the walk interleaves the owners (consecutive 128-row bands belong to consecutive ranks), so the tiles in
/// flight at any moment are spread over every owner. After the LSA barrier of block `b` (which pairs block `b` of
/// every rank), block `b` of each owner has every rank's partial of the tiles block `b` computed, and sums exactly
/// those of its own rows, the `R` slots in rank order (the same on every rank), into `out` (`m/R × n`). No block
/// reads what another block of any rank wrote: the per-block barrier is all the synchronisation the sum needs. A
/// second barrier keeps the slots until their owner has read them, so the next call's stores cannot overwrite
/// them early. `m / R` and `n` multiples of 128, `k` of 32; 256 threads per block, the same grid on every rank.
#[weft::kernel(
    types(f16, bf16),
    len(x >= m * k, w >= k * n, scratch >= m * n),
    launch_bounds(256, 2)
)]
#[allow(clippy::too_many_arguments)]
pub fn gemm_reduce_scatter<T: MmaElement>(
    dev: &DevComm<Lsa>,
    x: &[T],
    w: &[T],
    scratch: &Window<f32>,
    out: &mut [T],
    m: usize,
    n: usize,
    k: usize,
) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    let ranks = dev.lsa_size() as usize;
    let me = dev.lsa_rank() as usize;
    let shard = m / ranks;
    let tiles_n = n / 128;
    let tiles = (m / 128) * tiles_n;
    let slot = me * shard * n;
    let mut t = block_idx_x() as usize;
    while t < tiles {
        // Band `t / tiles_n` of the walk is band `band / R` of owner `band % R`.
        let band = t / tiles_n;
        let owner = band % ranks;
        let local_row0 = (band / ranks) * 128;
        let col0 = (t % tiles_n) * 128;
        let tile = x.gemm_block(owner * shard + local_row0, k, w, col0, n, k);
        let mut dst = scratch.lsa(owner as u32);
        let base = slot + local_row0 * n + col0;
        let mut i = 0;
        while i < tile.len() {
            dst[base + tile.row(i) * n + tile.col(i)] = tile.value(i);
            i += 1;
        }
        t += grid_dim_x() as usize;
    }
    // Block b of every rank has stored its tiles: the partials of this block's tiles of this rank's rows are in.
    bar.sync(Cta, Order::AcqRel);
    let mine = scratch.local();
    let count = shard * n;
    let mut t = block_idx_x() as usize;
    while t < tiles {
        let band = t / tiles_n;
        if band % ranks == me {
            let first = (band / ranks) * 128 * n + (t % tiles_n) * 128;
            let mut i = thread_idx_x() as usize;
            while i < 128 * 128 {
                let e = first + (i / 128) * n + i % 128;
                let mut acc = 0.0f32;
                for s in 0..ranks {
                    acc += mine[s * count + e];
                }
                out[e] = T::from_f32(acc);
                i += block_dim_x() as usize;
            }
        }
        t += grid_dim_x() as usize;
    }
    // This rank has read its slots: the peers' next call may overwrite them.
    bar.sync(Cta, Order::AcqRel);
}

/// [`gemm_reduce_scatter()`] on the persistent Hopper loop (`x.gemm_tiles(&w)`: TMA loads, `wgmma` in 128 × 256
/// tiles; docs/gemm.md, "weft's TMA loop"): every rank multiplies its own `k` slice (`x`: `m × k`, `w`: `k × n`, f16
/// or bf16) and gets rows `r·m/R ..` of the sum over ranks in `out` (`m/R × n`).
///
/// Each 128 × 256 partial tile goes from the registers straight into the window of the rank that owns its rows, in
/// this rank's slot (`scratch`: a symmetric window of `m × n` elements of `T`, `R` slots of `m/R × n`; the partials
/// are rounded to `T` once, as the unfused path's are before `ncclReduceScatter`), two values per store
/// (`gemm_store`). Every rank's block `b` walks the same tiles (the loop's order depends on the shape and the grid
/// only), so after LSA barrier `b` (its two consumer warpgroups: the loading warpgroup has left the kernel) block
/// `b` of each owner has every rank's partial of the tiles block `b` walked, and sums those of its own rows, the
/// `R` slots in rank order, 16 bytes at a time, into `out`. A second barrier keeps the slots until their owner has
/// read them. `m/R` a multiple of 128, `n` of 256, `k` of 64; launch with `gemm_tiles_config_shared` (the same
/// grid on every rank, all resident at once; it refuses a GPU that runs no `gemm_tiles` loop). TMA and `wgmma` on
/// Hopper, `cp.async` and `mma.sync` elsewhere or with `WEFT_GEMM_MAINLOOP=mma_sync`.
#[weft::kernel(types(f16, bf16), launch_bounds(384, 1))]
pub fn gemm_tiles_reduce_scatter<T: MmaElement>(
    dev: &DevComm<Lsa>,
    x: TmaMatrix<T>,
    w: TmaMatrix<T>,
    scratch: &Window<T>,
    out: &mut [T],
) {
    let ranks = dev.lsa_size() as usize;
    let me = dev.lsa_rank() as usize;
    let n = w.cols();
    let shard = x.rows() / ranks;
    let mut gemm = x.gemm_tiles(&w);
    // From here on only the consumer warpgroups run: warps 4 to 11.
    let consumers = WarpSpan::from_warps(4, 8, 1);
    let bar = dev.lsa_barrier(consumers, block_idx_x());
    while gemm.next_tile() {
        let owner = gemm.row0() / shard;
        let mut slot = scratch.lsa(owner as u32);
        // Row `row0 - owner·shard` of the owner's rows, in this rank's slot (rows `me·shard ..` of its scratch).
        slot.gemm_store(&gemm, me * shard + gemm.row0() - owner * shard, gemm.col0(), n);
    }
    // Block b of every rank has stored its tiles: the partials of block b's tiles of this rank's rows are in.
    bar.sync(consumers, Order::AcqRel);
    let mine = scratch.local();
    let lanes = pack_lanes::<T>();
    let slot_packs = shard * n / lanes;
    let row_packs = 256 / lanes;
    let tile_packs = 128 * row_packs;
    let thread = thread_idx_x() as usize - 128;
    let mut t = block_idx_x() as usize;
    while t < gemm.tiles() {
        let row0 = gemm.tile_row0(t);
        if row0 / shard == me {
            // Pack p of the tile: row p / row_packs, packs of 16 bytes along it; rows of `out` are this rank's.
            // Four packs per thread at a time: their loads from every slot are all issued before the first store
            // (a store may alias them as far as the compiler knows), so 64 bytes per thread and slot are in flight
            // instead of 16. A tile is 4096 packs (f16 and bf16: 8 lanes), 16 per thread. Pack p + 256 is
            // 256 / row_packs rows below pack p, in the same column (row_packs divides 256).
            let first = ((row0 - me * shard) * n + gemm.tile_col0(t)) / lanes;
            let stride = n / lanes;
            let apart = (256 / row_packs) * stride;
            let mut p = thread;
            while p < tile_packs {
                let at0 = first + (p / row_packs) * stride + p % row_packs;
                let (at1, at2, at3) = (at0 + apart, at0 + 2 * apart, at0 + 3 * apart);
                let mut acc0 = WidePack::<T>::splat(0.0);
                let mut acc1 = WidePack::<T>::splat(0.0);
                let mut acc2 = WidePack::<T>::splat(0.0);
                let mut acc3 = WidePack::<T>::splat(0.0);
                for s in 0..ranks {
                    acc0 += mine.load_pack(s * slot_packs + at0).widen();
                    acc1 += mine.load_pack(s * slot_packs + at1).widen();
                    acc2 += mine.load_pack(s * slot_packs + at2).widen();
                    acc3 += mine.load_pack(s * slot_packs + at3).widen();
                }
                out.store_pack(at0, acc0.narrow());
                out.store_pack(at1, acc1.narrow());
                out.store_pack(at2, acc2.narrow());
                out.store_pack(at3, acc3.narrow());
                p += 1024;
            }
        }
        t += grid_dim_x() as usize;
    }
    // This rank has read its slots: the peers' next call may overwrite them.
    bar.sync(consumers, Order::AcqRel);
}

/// [`allgather_gemm()`] on the persistent Hopper loop (TMA loads, `wgmma` in 128 × 256 tiles; docs/gemm.md,
/// "All-gather + GEMM on the loop"): `out (m × n) = all_gather(x) (m × k) × w (k × n)`, f16 or bf16, accumulated in
/// f32 and rounded once.
///
/// `x` describes every rank's shard of the activations in its window (`TmaShards::gemm_a`: one tensor map per LSA
/// rank), so the loop's producer reads each tile's rows with TMA straight from the owner's window, and each rank's
/// blocks start with its own rows. Nothing is gathered into a local copy. The first LSA barrier (the whole block,
/// before the loop opens) makes every shard readable; the second (the two consumer warpgroups after the loop: the
/// loading warpgroup has left the kernel) keeps each shard until no peer's block reads it. Each 128 × 256 tile is
/// stored whole (`gemm_store`). `m/R` a multiple of 128, `n` of 256, `k` of 64; launch with
/// `gemm_tiles_config_shared` (the same grid on every rank, all resident at once). On Hopper (unless
/// `WEFT_GEMM_MAINLOOP=mma_sync`) the producer reads through one tensor map per rank; otherwise the `mma.sync`
/// loop's producer copies from each rank's window address with `cp.async` (the same shards, the same walk).
#[weft::kernel(types(f16, bf16), launch_bounds(384, 1))]
pub fn allgather_gemm_tiles<T: MmaElement>(dev: &DevComm<Lsa>, x: TmaShards<T>, w: TmaMatrix<T>, out: &mut [T]) {
    // Every rank's shard is in place before TMA reads it (the loop fences TMA's reads after this acquire).
    let start = dev.lsa_barrier(Cta, block_idx_x());
    start.sync(Cta, Order::Acquire);
    start.end();
    let n = w.cols();
    let mut gemm = x.gemm_tiles(&w);
    // From here on only the consumer warpgroups run: warps 4 to 11.
    let consumers = WarpSpan::from_warps(4, 8, 1);
    let done = dev.lsa_barrier(consumers, block_idx_x());
    while gemm.next_tile() {
        out.gemm_store(&gemm, gemm.row0(), gemm.col0(), n);
    }
    // Block b's copies have all landed (its consumers waited for every stage): once block b of every rank has, the
    // peers may change their shards.
    done.sync(consumers, Order::Release);
}

/// The communication half of the decoupled all-gather + GEMM (example 08's fourth variant, PyTorch's async-TP
/// shape): copies every rank's shard of `x` into `gathered` (`R × shard` elements, rank order) over LSA, in chunks of
/// `chunk` elements, one chunk per block at a time, and raises `ready[c] = epoch` once chunk `c` is complete — so a
/// GEMM on another stream, gated by `DeviceBuffer::stream_wait_at_least(stream, c, epoch)`, starts on a chunk as
/// soon as it is in place while the copies of the others go on. Chunk `c` holds elements `c·chunk ..` of
/// `gathered`; each rank copies its own shard first. `shard` a multiple of `chunk`, `chunk` of the 16-byte pack;
/// the same grid on every rank (the first barrier makes every shard readable, the last keeps it until copied).
#[weft::kernel(
    types(f16, bf16),
    len(x >= shard, gathered >= shard * lsa_size, ready >= shard / chunk * lsa_size)
)]
pub fn allgather_signal<T: Float>(
    dev: &DevComm<Lsa>,
    x: &Window<T>,
    gathered: &mut [T],
    ready: &mut [u32],
    shard: usize,
    chunk: usize,
    epoch: u32,
) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Acquire);
    let ranks = dev.lsa_size() as usize;
    let per_shard = shard / chunk;
    let chunks = per_shard * ranks;
    let lanes = pack_lanes::<T>();
    let packs = chunk / lanes;
    let first = dev.lsa_rank() as usize * per_shard;
    let mut i = block_idx_x() as usize;
    while i < chunks {
        let c = (i + first) % chunks;
        let owner = c / per_shard;
        let from = (c % per_shard) * packs;
        let to = c * packs;
        let source = x.lsa(owner as u32);
        let mut p = thread_idx_x() as usize;
        while p < packs {
            gathered.store_pack(to + p, source.load_pack(from + p));
            p += block_dim_x() as usize;
        }
        // Every thread's copy of the chunk is done (the block barrier) and visible GPU-wide (the fence) before
        // its flag is raised.
        sync_threads();
        if thread_idx_x() == 0 {
            threadfence();
            atomic_store(&mut ready[c], epoch, Order::Release, Scope::Device);
        }
        i += grid_dim_x() as usize;
    }
    bar.sync(Cta, Order::Release);
}

/// Whether `m × n × k` on `ranks` ranks suits [`allgather_gemm()`] and [`gemm_reduce_scatter()`] (`m / ranks` and `n`
/// multiples of 128, `k` a positive multiple of 32): an error naming the dimension and the fix, before a launch whose
/// device-side check would stop the kernel (and with it the CUDA context).
pub fn check_shape(m: usize, n: usize, k: usize, ranks: usize) -> Result<(), weft::host::Error> {
    let problem = if ranks == 0 || m % ranks != 0 {
        Some(format!("m = {m} rows do not split evenly over {ranks} ranks"))
    } else if m / ranks == 0 || (m / ranks) % 128 != 0 {
        Some(format!("each rank's {} rows are not a positive multiple of 128 (the GEMM's tile)", m / ranks))
    } else if n == 0 || n % 128 != 0 {
        Some(format!("n = {n} is not a positive multiple of 128 (the GEMM's tile)"))
    } else if k == 0 || k % 32 != 0 {
        Some(format!("k = {k} is not a positive multiple of 32 (the GEMM's k step)"))
    } else {
        None
    };
    match problem {
        Some(problem) => Err(weft::host::Error::InvalidArgument {
            argument: "shape",
            problem: format!("{problem}: pad the matrices to whole tiles, or use NCCL + cuBLAS for this shape"),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::check_shape;

    #[test]
    fn shapes_are_checked_before_a_launch() {
        assert!(check_shape(1024, 256, 64, 8).is_ok());
        assert!(check_shape(128, 128, 32, 1).is_ok());
        for (m, n, k, ranks, names) in [
            (1004, 256, 64, 8, "split evenly"),
            (512, 256, 64, 8, "multiple of 128"),
            (1024, 200, 64, 8, "n = 200"),
            (1024, 256, 48, 8, "k = 48"),
            (1024, 256, 0, 8, "k = 0"),
            (1024, 256, 64, 0, "0 ranks"),
        ] {
            let error = check_shape(m, n, k, ranks).unwrap_err().to_string();
            assert!(error.contains(names) && error.contains("pad the matrices"), "{m}x{n}x{k}@{ranks}: {error}");
        }
    }
}
