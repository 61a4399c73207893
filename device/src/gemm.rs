//! A block-level GEMM mainloop on tensor cores: `a.gemm_block(row0, lda, b, col0, ldb, k)` is the 128 × 128 `f32`
//! tile `a[row0 .. row0 + 128, 0 .. k] × b[0 .. k, col0 .. col0 + 128]` of row-major f16 or bf16 operands, computed
//! by the whole block together. C++ `weft::detail::gemm_block_at` (weft.cuh) and `weft::GemmTile`.
//!
//! The mainloop is weft's C++: tiles of `k = 32` stream through three shared-memory stages with `cp.async`, stored
//! swizzled (so the `ldmatrix` reads of eight rows hit eight bank groups), and 8 warps multiply them with
//! `mma.sync m16n8k16` into 64 × 32 warp tiles. What the tile becomes is written in the kernel — the epilogue
//! hook: each thread walks its share of the tile ([`GemmTile::len`] values, each at [`GemmTile::row`],
//! [`GemmTile::col`]) and stores, scales, adds a bias, or sends it to a peer:
//!
//! ```
//! use weft_device::prelude::*;
//!
//! // out (m x n, f32) = a (m x k) * b (k x n) + bias (n); launch 256 threads per block, one block per tile.
//! fn linear(a: &[bf16], b: &[bf16], bias: &[f32], out: &mut [f32], m: usize, n: usize, k: usize) {
//!     let tiles_n = n / 128;
//!     let (row0, col0) = ((block_idx_x() as usize / tiles_n) * 128, (block_idx_x() as usize % tiles_n) * 128);
//!     let tile = a.gemm_block(row0, k, b, col0, n, k);
//!     for i in 0..tile.len() {
//!         let (r, c) = (row0 + tile.row(i), col0 + tile.col(i));
//!         out[r * n + c] = tile.value(i) + bias[c];
//!     }
//! }
//! ```
//!
//! Preconditions, checked on the device at every call (a failed one stops the kernel with its line, like an
//! out-of-bounds index): blocks of exactly 256 threads, every thread of the block calls it together, `k` a positive
//! multiple of 32, `lda`, `ldb` and `col0` multiples of 8 and both operands on 16-byte boundaries (16-byte copies),
//! and both tiles inside their buffers. The operands may be slices or window views (a peer's rows read over LSA:
//! the all-gather + GEMM of a column-parallel linear layer). It uses 48 KB of shared memory, the static limit of a
//! block: a kernel that calls it has no room for other shared arrays.

use core::marker::PhantomData;

use crate::device_only;
use crate::mma::MmaElement;
use crate::window::WindowView;

/// This thread's share of a block's 128 × 128 `f32` product tile (64 values). C++ `weft::GemmTile`.
#[derive(Debug, Clone, Copy)]
pub struct GemmTile {
    _device_only: PhantomData<f32>,
}

impl GemmTile {
    /// Rows of the block's tile. C++ `GemmTile::ROWS`.
    pub const ROWS: usize = 128;
    /// Columns of the block's tile. C++ `GemmTile::COLS`.
    pub const COLS: usize = 128;

    /// How many of the tile's values this thread holds (64). C++ `tile.len()`.
    pub fn len(&self) -> usize {
        device_only("GemmTile::len")
    }

    /// Always false: every thread holds a share. C++ `tile.is_empty()`.
    pub fn is_empty(&self) -> bool {
        device_only("GemmTile::is_empty")
    }

    /// The tile row (`0..128`) of this thread's value `i`. C++ `tile.row(i)`.
    pub fn row(&self, i: usize) -> usize {
        device_only("GemmTile::row")
    }

    /// The tile column (`0..128`) of this thread's value `i`. C++ `tile.col(i)`.
    pub fn col(&self, i: usize) -> usize {
        device_only("GemmTile::col")
    }

    /// This thread's value `i`. C++ `tile.value(i)`.
    pub fn value(&self, i: usize) -> f32 {
        device_only("GemmTile::value")
    }
}

/// The operands of [`GemmOperand::gemm_block`]: slices and window views of f16 or bf16.
pub trait GemmOperand<T: MmaElement> {
    /// The block's 128 × 128 tile `self[row0 .., 0 .. k] × b[0 .. k, col0 ..]` (row-major, `lda` and `ldb`
    /// elements per row), every thread of the block calling it together (module docs). C++
    /// `weft::detail::gemm_block_at(a, row0, lda, b, col0, ldb, k, line)`.
    fn gemm_block(
        &self,
        row0: usize,
        lda: usize,
        b: &(impl GemmOperand<T> + ?Sized),
        col0: usize,
        ldb: usize,
        k: usize,
    ) -> GemmTile;
}

macro_rules! gemm_operands {
    ($($ty:ty),*) => {$(
        impl<T: MmaElement> GemmOperand<T> for $ty {
            fn gemm_block(
                &self,
                row0: usize,
                lda: usize,
                b: &(impl GemmOperand<T> + ?Sized),
                col0: usize,
                ldb: usize,
                k: usize,
            ) -> GemmTile {
                device_only("gemm_block")
            }
        }
    )*};
}
gemm_operands!([T], WindowView<'_, T>);

/// A row-major f16 or bf16 matrix described for Hopper's tensor memory accelerator (TMA): a kernel parameter
/// (`a: TmaMatrix<bf16>`) that the host builds from a buffer and its shape (`weft::host::launch::TmaOperand`), and
/// that the kernel reads only through [`gemm_tiles`](TmaMatrix::gemm_tiles). C++ `weft::TmaMatrix<T>`, passed as a
/// `__grid_constant__` parameter (TMA reads its tensor map where the launch put it), so neither `Clone` nor `Copy`:
/// a kernel lends it by reference, and the macro refuses to copy or move it.
#[derive(Debug)]
pub struct TmaMatrix<T> {
    _device_only: PhantomData<T>,
}

impl<T: MmaElement> TmaMatrix<T> {
    /// Rows of the matrix. C++ `a.rows()`.
    pub fn rows(&self) -> usize {
        device_only("TmaMatrix::rows")
    }

    /// Columns of the matrix. C++ `a.cols()`.
    pub fn cols(&self) -> usize {
        device_only("TmaMatrix::cols")
    }

    /// The persistent GEMM `self (m × k) × b (k × n)` in 128 × 256 tiles, opened by every thread of the block
    /// together; the kernel's loop `while gemm.next_tile() { … }` gets each of the block's tiles in turn, computed in
    /// `f32`, and its body is the epilogue. C++ `a.gemm_tiles(b)` (weft.cuh, `GemmTiles`).
    ///
    /// A block is three warpgroups: the first loads stages (with TMA, or with `cp.async`) and **leaves the kernel
    /// here** (so code after this call runs on threads 128–383 only: `thread_idx_x() == 0` is never true after it);
    /// the other two multiply, 64 rows of the tile each. Blocks are persistent: block `b` takes tiles `b`,
    /// `b + grid`, …, so launch at most one block per multiprocessor (`weft::host::launch::gemm_tiles_config`).
    ///
    /// Two loops behind one API: Hopper's TMA and `wgmma` where the kernel is compiled for sm_90a (the default;
    /// `WEFT_GEMM_MAINLOOP=mma_sync` turns it off); elsewhere (from compute capability 8.0) the same stages filled by
    /// `cp.async` and multiplied by `mma.sync` in 64 × 64 warp squares. The values' places in the tile ([`GemmTiles::row`],
    /// [`GemmTiles::col`]) differ between them; `gemm_store` follows either.
    ///
    /// Preconditions, checked when it opens (a failed one stops the kernel with a trap report naming the rule):
    /// blocks of exactly 384 threads with the dynamic shared memory of the GPU's stages (`GemmTiles::MAX_STAGES`:
    /// 4 stages on Hopper, 3 on an A100, 2 where a block may have 99 KB; `gemm_tiles_config` sizes it), a GPU of
    /// compute capability 8.0 or newer, `self.cols() == b.rows()`, `m` a multiple of 128, `n` of 256, `k` a
    /// positive multiple of 64, and both maps made for it (`TmaOperand::gemm_a`, `TmaOperand::gemm_b`).
    /// Kernels that call it declare `#[weft::kernel(launch_bounds(384, 1))]`. The loop body must not synchronise
    /// the whole block (`sync_threads`): the loading warpgroup has left.
    pub fn gemm_tiles(&self, b: &TmaMatrix<T>) -> GemmTiles<T> {
        device_only("TmaMatrix::gemm_tiles")
    }
}

/// A row-major f16 or bf16 matrix sharded by rows over the LSA team, described for TMA: LSA rank `r`'s
/// [`shard_rows`](TmaShards::shard_rows) rows are the start of its part of a symmetric window, and the matrix is
/// every rank's shard in rank order. A kernel parameter (`x: TmaShards<bf16>`) that the host builds from the window
/// (`weft::host::launch::TmaShards::gemm_a`), read only through [`gemm_tiles`](TmaShards::gemm_tiles): the loop
/// reads each tile's rows straight from their owner's window, so an all-gather + GEMM (a column-parallel linear
/// layer) needs no gathered copy. It holds one tensor map per rank (at most 8 ranks). C++ `weft::TmaShards<T>`, a
/// `__grid_constant__` parameter, so neither `Clone` nor `Copy`, like [`TmaMatrix`].
///
/// TMA reads the peers' shards: the kernel must know they are in place before it opens the loop (an LSA barrier
/// with `Order::Acquire`, ended before `gemm_tiles`), and keep them until every peer has read them (a second
/// barrier, of the consumer warpgroups, after the loop). kit's `allgather_gemm_tiles` shows both.
#[derive(Debug)]
pub struct TmaShards<T> {
    _device_only: PhantomData<T>,
}

impl<T: MmaElement> TmaShards<T> {
    /// Rows of the whole matrix: every rank's shard. C++ `x.rows()`.
    pub fn rows(&self) -> usize {
        device_only("TmaShards::rows")
    }

    /// Columns of the matrix. C++ `x.cols()`.
    pub fn cols(&self) -> usize {
        device_only("TmaShards::cols")
    }

    /// Rows of one rank's shard. C++ `x.shard_rows()`.
    pub fn shard_rows(&self) -> usize {
        device_only("TmaShards::shard_rows")
    }

    /// The persistent Hopper GEMM `self (m × k) × b (k × n)`, as [`TmaMatrix::gemm_tiles`] (the same loop, the same
    /// rules, the same `GemmTiles`), but each tile's rows of `self` are read through their owner's map, and the
    /// walk starts at this rank's own rows (a rotation of the bands: every rank still gets every tile of its
    /// blocks' share, in `gemm.row0()` order of the whole matrix), so that at any moment the ranks read different
    /// peers. Its own rule, checked when it opens: each shard a positive multiple of 128 rows. C++
    /// `x.gemm_tiles(b)`.
    pub fn gemm_tiles(&self, b: &TmaMatrix<T>) -> GemmTiles<T> {
        device_only("TmaShards::gemm_tiles")
    }
}

/// A block's walk over its 128 × 256 tiles of a [`TmaMatrix::gemm_tiles`] product of `T` matrices, and this thread's
/// share (128 `f32` values) of the current one. C++ `weft::GemmTiles<T>`.
#[derive(Debug)]
pub struct GemmTiles<T: MmaElement> {
    _device_only: PhantomData<T>,
}

impl<T: MmaElement> GemmTiles<T> {
    /// Rows of a tile. C++ `GemmTiles::BM`.
    pub const ROWS: usize = 128;
    /// Columns of a tile. C++ `GemmTiles::BN`.
    pub const COLS: usize = 256;
    /// Threads per block. C++ `GemmTiles::THREADS`.
    pub const THREADS: u32 = 384;
    /// Bytes of one pipeline stage: a 128 × 64 slice of `a` and a 64 × 256 slice of `b`. C++
    /// `GemmTiles::STAGE_BYTES`.
    pub const STAGE_BYTES: u32 = (128 * 64 + 64 * 256) * 2;
    /// The most stages the loop pipes through (where a block may have 227 KB of shared memory: Hopper); an A100
    /// gets 3, a GPU with 99 KB per block 2 (the host's `weft::host::jit::gemm_tiles_stages`). A kernel compiled for
    /// `s` stages needs `s` stages, 1 KB for their alignment and two 8-byte barriers per stage of dynamic shared
    /// memory (C++ `GemmTiles::SHARED_BYTES`; the host's `weft::host::launch::gemm_tiles_shared_bytes`).
    pub const MAX_STAGES: u32 = 4;

    /// Computes the block's next tile: `true` while one is left (then [`row0`](Self::row0), [`col0`](Self::col0)
    /// and the values describe it). C++ `gemm.next_tile()`.
    pub fn next_tile(&mut self) -> bool {
        device_only("GemmTiles::next_tile")
    }

    /// The first row of the current tile in the product. C++ `gemm.row0()`.
    pub fn row0(&self) -> usize {
        device_only("GemmTiles::row0")
    }

    /// The first column of the current tile in the product. C++ `gemm.col0()`.
    pub fn col0(&self) -> usize {
        device_only("GemmTiles::col0")
    }

    /// How many of the tile's values this thread holds (128). C++ `gemm.len()`.
    pub fn len(&self) -> usize {
        device_only("GemmTiles::len")
    }

    /// Always false: every multiplying thread holds a share. C++ `gemm.is_empty()`.
    pub fn is_empty(&self) -> bool {
        device_only("GemmTiles::is_empty")
    }

    /// The tile row (`0..128`) of this thread's value `i`. C++ `gemm.row(i)`.
    pub fn row(&self, i: usize) -> usize {
        device_only("GemmTiles::row")
    }

    /// The tile column (`0..256`) of this thread's value `i`. C++ `gemm.col(i)`.
    pub fn col(&self, i: usize) -> usize {
        device_only("GemmTiles::col")
    }

    /// This thread's value `i` of the current tile. C++ `gemm.value(i)`.
    pub fn value(&self, i: usize) -> f32 {
        device_only("GemmTiles::value")
    }

    /// Tiles of the whole product (`m/128 · n/256`). C++ `gemm.tiles()`.
    pub fn tiles(&self) -> usize {
        device_only("GemmTiles::tiles")
    }

    /// The first row of tile `t` of the loop's order. Block `b` computes tiles `b`, `b + grid_dim_x()`, …, and the
    /// order depends on the shape and the grid only, so every rank's block `b` walks the same tiles: a second pass
    /// over them (the sum of a reduce-scatter) walks `t` the same way. C++ `gemm.tile_row0(t)`.
    pub fn tile_row0(&self, t: usize) -> usize {
        device_only("GemmTiles::tile_row0")
    }

    /// The first column of tile `t` of the loop's order (see [`tile_row0`](Self::tile_row0)). C++
    /// `gemm.tile_col0(t)`.
    pub fn tile_col0(&self, t: usize) -> usize {
        device_only("GemmTiles::tile_col0")
    }

    /// Makes this thread's value `i` of the current tile `v`: an epilogue that changes the values (a scale, a bias,
    /// an activation) before [`GemmStore::gemm_store`] writes them. C++ `gemm.set_value(i, v)`.
    pub fn set_value(&mut self, i: usize, v: f32) {
        device_only("GemmTiles::set_value")
    }
}

/// Stores of a [`GemmTiles`] tile into a row-major matrix of the product's element type (a slice, or a window view:
/// a peer's memory over LSA).
pub trait GemmStore<T: MmaElement> {
    /// Writes the current tile of `gemm`, rounded to `T`, to rows `row0..row0 + 128` and columns
    /// `col0..col0 + 256` of the matrix with `ld` elements per row (`gemm.row0(), gemm.col0()` for the product
    /// itself; another place for a slot of a reduce-scatter's scratch): two neighbouring values per 4-byte store
    /// (where the container's start, `ld` and `col0` keep them aligned; one at a time otherwise), half the stores of
    /// a loop over `gemm.value(i)`. The whole tile is checked against the container on the device (a tile outside it
    /// stops the kernel with its line). C++ `weft::detail::gemm_store_at(x, gemm, row0, col0, ld, line)`.
    fn gemm_store(&mut self, gemm: &GemmTiles<T>, row0: usize, col0: usize, ld: usize);
}

impl<T: MmaElement> GemmStore<T> for [T] {
    fn gemm_store(&mut self, gemm: &GemmTiles<T>, row0: usize, col0: usize, ld: usize) {
        device_only("gemm_store")
    }
}

impl<T: MmaElement> GemmStore<T> for WindowView<'_, T> {
    fn gemm_store(&mut self, gemm: &GemmTiles<T>, row0: usize, col0: usize, ld: usize) {
        device_only("gemm_store")
    }
}
