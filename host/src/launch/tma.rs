//! Matrices described for Hopper's tensor memory accelerator (TMA): what a kernel's `const __grid_constant__
//! CUtensorMap` parameter holds, checked against TMA's rules when made and against its buffer when pushed.
//!
//! A tensor map records a global address and the extent TMA may copy from; a copy never reads outside that extent
//! (boxes that cross its edge are filled with zeros). So a map is as sound as the extent it names: weft encodes it
//! only when it is pushed with its buffer ([`ArgBuffer::push_tma_matrix`](super::ArgBuffer::push_tma_matrix)), after
//! checking that every element of the extent lies inside that buffer, and the launch records its read of the buffer
//! like a `&[T]` argument's (what freeing the buffer waits for).

use std::marker::PhantomData;

use cudarc::driver::sys;

use crate::error::{Error, Result};

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}

    /// What a [`super::TmaBuffer`] tells a launch recorded into a CUDA graph: the buffer as a graph buffer (weft's
    /// `DeviceBuffer`, whose drop waits for the graph's replays), or `None` (cudarc's types: eager launches only).
    pub trait TmaBuffer<T> {
        fn graph_buffer(&self) -> Option<&dyn crate::graph::sealed::GraphBuffer<T>>;
    }
}

/// A buffer a kernel's `TmaMatrix<T>` parameter may describe: cudarc's `CudaSlice<T>`, `CudaView<'_, T>` and
/// `CudaViewMut<'_, T>`, and weft's `DeviceBuffer<T>`, the one a kernel recorded into a CUDA graph may read through
/// TMA (its drop waits for the graph's replays). Sealed, like [`KernelSlice`](super::KernelSlice).
pub trait TmaBuffer<T>: super::KernelSlice<T> + sealed::TmaBuffer<T> {}

macro_rules! eager_tma_buffer {
    ($($ty:ty),* $(,)?) => {$(
        impl<T> sealed::TmaBuffer<T> for $ty {
            fn graph_buffer(&self) -> Option<&dyn crate::graph::sealed::GraphBuffer<T>> {
                None
            }
        }
        impl<T> TmaBuffer<T> for $ty {}
    )*};
}
eager_tma_buffer!(cudarc::driver::CudaSlice<T>, cudarc::driver::CudaView<'_, T>, cudarc::driver::CudaViewMut<'_, T>);

impl<T: cudarc::driver::DeviceRepr> sealed::TmaBuffer<T> for crate::resources::DeviceBuffer<T> {
    fn graph_buffer(&self) -> Option<&dyn crate::graph::sealed::GraphBuffer<T>> {
        Some(self)
    }
}
impl<T: cudarc::driver::DeviceRepr> TmaBuffer<T> for crate::resources::DeviceBuffer<T> {}

/// The element types weft describes for TMA: the tensor-core inputs `f16` and `bf16` (sealed).
pub trait TmaElement: sealed::Sealed + Copy + 'static {
    /// TMA's name for the type.
    const DATA_TYPE: sys::CUtensorMapDataType;
}

impl TmaElement for half::f16 {
    const DATA_TYPE: sys::CUtensorMapDataType = sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

impl TmaElement for half::bf16 {
    const DATA_TYPE: sys::CUtensorMapDataType = sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

/// The bytes of a box row in the 128-byte swizzle: TMA writes each box row as 128 bytes whose 16-byte chunks are
/// permuted by the row's index, the layout `wgmma` reads as its 128-byte-swizzle operand.
pub(crate) const SWIZZLE_BYTES: usize = 128;

/// A row-major `rows × cols` matrix of `T` with `ld` elements from one row to the next, that TMA copies into shared
/// memory `box_rows × box_cols` elements at a time, in the 128-byte swizzle (a box row at most 128 bytes).
///
/// ```
/// use weft_host::launch::TmaMatrix;
/// // A 4096 x 8192 bf16 operand, copied in 128-row boxes of 64 columns (one 128-byte swizzled row each).
/// let a = TmaMatrix::<half::bf16>::new(4096, 8192, 8192, [128, 64]).unwrap();
/// assert_eq!((a.box_bytes(), a.elements_spanned()), (16384, 4096 * 8192));
/// // Rows 8 columns apart are fine; 12 are not (TMA steps between rows in multiples of 16 bytes).
/// assert!(TmaMatrix::<half::bf16>::new(64, 12, 12, [64, 64]).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmaMatrix<T> {
    rows: usize,
    cols: usize,
    ld: usize,
    box_rows: u32,
    box_cols: u32,
    element: PhantomData<T>,
}

/// TMA's limits (CUDA driver API, `cuTensorMapEncodeTiled`): each extent at most 2^32 elements, a row stride
/// below 2^40 bytes and a multiple of 16, box sides of 1 to 256 elements, a box row a multiple of 16 bytes.
const MAX_EXTENT: usize = 1 << 32;
const MAX_STRIDE_BYTES: usize = 1 << 40;
const MAX_BOX: u32 = 256;

impl<T: TmaElement> TmaMatrix<T> {
    /// The description, checked against TMA's rules; each error names the argument and what it must be.
    pub fn new(rows: usize, cols: usize, ld: usize, [box_rows, box_cols]: [u32; 2]) -> Result<TmaMatrix<T>> {
        let size = std::mem::size_of::<T>();
        if rows == 0 || cols == 0 {
            return Err(Error::invalid(
                "rows",
                format!("a {rows} x {cols} matrix is empty: TMA copies at least 1 x 1"),
            ));
        }
        if rows > MAX_EXTENT || cols > MAX_EXTENT {
            return Err(Error::invalid(
                "rows",
                format!("{rows} x {cols}: TMA addresses at most 2^32 rows and columns; split the matrix"),
            ));
        }
        if ld < cols {
            return Err(Error::invalid(
                "ld",
                format!("{ld} elements from row to row is fewer than the {cols} columns: rows would overlap"),
            ));
        }
        if (ld * size) % 16 != 0 || ld * size >= MAX_STRIDE_BYTES {
            return Err(Error::invalid(
                "ld",
                format!(
                    "{ld} elements ({} bytes) from row to row: TMA steps between rows in multiples of 16 bytes below \
                     2^40 (ld a multiple of {})",
                    ld * size,
                    16 / size
                ),
            ));
        }
        if !(1..=MAX_BOX).contains(&box_rows) || !(1..=MAX_BOX).contains(&box_cols) {
            return Err(Error::invalid(
                "box",
                format!("a {box_rows} x {box_cols} box: TMA copies boxes of 1 to {MAX_BOX} elements a side"),
            ));
        }
        let row_bytes = box_cols as usize * size;
        if row_bytes % 16 != 0 || row_bytes > SWIZZLE_BYTES {
            return Err(Error::invalid(
                "box",
                format!(
                    "{box_cols} columns make a box row of {row_bytes} bytes: in the 128-byte swizzle a box row is a \
                     multiple of 16 bytes up to 128 ({} to {} columns in steps of {})",
                    16 / size,
                    SWIZZLE_BYTES / size,
                    16 / size
                ),
            ));
        }
        Ok(TmaMatrix { rows, cols, ld, box_rows, box_cols, element: PhantomData })
    }

    /// Rows of the matrix.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of the matrix.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Elements from one row to the next.
    pub fn ld(&self) -> usize {
        self.ld
    }

    /// The box one copy moves: `[rows, columns]`.
    pub fn box_shape(&self) -> [u32; 2] {
        [self.box_rows, self.box_cols]
    }

    /// The shared memory one copy fills: `box_rows × box_cols` elements.
    pub fn box_bytes(&self) -> usize {
        self.box_rows as usize * self.box_cols as usize * std::mem::size_of::<T>()
    }

    /// The elements from the first to the last the matrix covers: a buffer must hold at least this many.
    pub fn elements_spanned(&self) -> usize {
        (self.rows - 1) * self.ld + self.cols
    }

    /// Refuses a buffer of `len` elements that the matrix spans past: a map over it would let TMA read beyond it.
    pub(crate) fn check_span(&self, len: usize) -> Result<()> {
        if len >= self.elements_spanned() {
            return Ok(());
        }
        Err(Error::invalid(
            "buffer",
            format!(
                "holds {len} elements, and a {} x {} matrix {} elements from row to row spans {}: pass a larger buffer \
                 or a smaller matrix",
                self.rows,
                self.cols,
                self.ld,
                self.elements_spanned()
            ),
        ))
    }

    /// The `CUtensorMap` (its 128 bytes, as a kernel takes them) for the matrix at device `address`, which must be
    /// 16-byte aligned. The caller vouches that `address` starts at least [`elements_spanned`](Self::elements_spanned)
    /// elements of live device memory ([`ArgBuffer::push_tma_matrix`](super::ArgBuffer::push_tma_matrix) checks it).
    pub(crate) fn encode(&self, address: u64) -> Result<[u8; 128]> {
        if address % 16 != 0 {
            return Err(Error::invalid(
                "buffer",
                format!("starts at {address:#x}: TMA copies from 16-byte aligned addresses; pass an aligned buffer"),
            ));
        }
        crate::cuda::driver()?;
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        // Innermost first: columns, then rows; the one stride is the rows'.
        let dims = [self.cols as u64, self.rows as u64];
        let strides = [(self.ld * std::mem::size_of::<T>()) as u64];
        let boxes = [self.box_cols, self.box_rows];
        let element_strides = [1u32, 1];
        // SAFETY: `map` is a CUtensorMap (its size, aligned past the 64 bytes the encode asks), `dims`, `strides`,
        // `boxes` and `element_strides` are live arrays of the lengths rank 2 asks (2, 1, 2, 2), and the values meet
        // TMA's rules (checked in `new`, and the address above). The encode writes `map` only, reads those arrays,
        // and records `address` without dereferencing it.
        unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                T::DATA_TYPE,
                2,
                address as usize as *mut std::ffi::c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                element_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        }
        .result()?;
        let mut bytes = [0u8; 128];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(map.opaque) {
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
        Ok(bytes)
    }
}

/// A [`TmaMatrix`] over the buffer it describes: what a kernel's `TmaMatrix<T>` parameter takes. Made only when the
/// matrix lies inside the buffer, so the map a launch encodes from it lets TMA read that buffer and nothing else.
pub struct TmaOperand<'a, T> {
    buffer: &'a dyn super::buffers::sealed::Buffer<T>,
    graph: Option<&'a dyn crate::graph::sealed::GraphBuffer<T>>,
    matrix: TmaMatrix<T>,
}

impl<T> std::fmt::Debug for TmaOperand<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TmaOperand")
            .field("rows", &self.matrix.rows)
            .field("cols", &self.matrix.cols)
            .field("ld", &self.matrix.ld)
            .field("box", &[self.matrix.box_rows, self.matrix.box_cols])
            .field("buffer_len", &self.buffer.buffer_len())
            .finish()
    }
}

impl<'a, T: TmaElement> TmaOperand<'a, T> {
    /// `matrix` over `buffer`; fails if `buffer` holds fewer elements than the matrix spans.
    pub fn new(buffer: &'a impl TmaBuffer<T>, matrix: TmaMatrix<T>) -> Result<TmaOperand<'a, T>> {
        matrix.check_span(super::buffers::sealed::Buffer::buffer_len(buffer))?;
        Ok(TmaOperand { buffer, graph: sealed::TmaBuffer::graph_buffer(buffer), matrix })
    }

    /// The left operand of `gemm_tiles`: the `rows × cols` matrix (`m × k`) at the start of `buffer`, `ld` elements
    /// from row to row, copied in the 128 × 64 boxes its stages take.
    pub fn gemm_a(buffer: &'a impl TmaBuffer<T>, rows: usize, cols: usize, ld: usize) -> Result<Self> {
        TmaOperand::new(buffer, TmaMatrix::new(rows, cols, ld, [128, 64])?)
    }

    /// The right operand of `gemm_tiles`: the `rows × cols` matrix (`k × n`) at the start of `buffer`, in 64 × 64
    /// boxes (four per 256-column tile).
    pub fn gemm_b(buffer: &'a impl TmaBuffer<T>, rows: usize, cols: usize, ld: usize) -> Result<Self> {
        TmaOperand::new(buffer, TmaMatrix::new(rows, cols, ld, [64, 64])?)
    }

    /// The description.
    pub fn matrix(&self) -> &TmaMatrix<T> {
        &self.matrix
    }

    pub(crate) fn buffer(&self) -> &'a dyn super::buffers::sealed::Buffer<T> {
        self.buffer
    }

    /// The buffer as a graph buffer, where it is one (weft's `DeviceBuffer`).
    pub(crate) fn graph_buffer(&self) -> Option<&'a dyn crate::graph::sealed::GraphBuffer<T>> {
        self.graph
    }
}

/// The bytes of C++ `weft::TmaMatrix<T>` (weft.cuh): the tensor map, then rows and columns (`u64`), the box (`u32`
/// rows, `u32` columns), and the address and row stride in elements (`u64`, what the `mma.sync` loop copies from:
/// the map's extent), 192 bytes at 64-byte alignment.
pub(crate) fn kernel_image<T: TmaElement>(matrix: &TmaMatrix<T>, address: u64) -> Result<[u8; 192]> {
    let mut image = [0u8; 192];
    image[..128].copy_from_slice(&matrix.encode(address)?);
    image[128..136].copy_from_slice(&(matrix.rows as u64).to_ne_bytes());
    image[136..144].copy_from_slice(&(matrix.cols as u64).to_ne_bytes());
    image[144..148].copy_from_slice(&matrix.box_rows.to_ne_bytes());
    image[148..152].copy_from_slice(&matrix.box_cols.to_ne_bytes());
    image[152..160].copy_from_slice(&address.to_ne_bytes());
    image[160..168].copy_from_slice(&(matrix.ld as u64).to_ne_bytes());
    Ok(image)
}

/// The most LSA ranks a [`TmaShards`] describes: its maps are one kernel parameter (C++ `TmaShards::MAX_PEERS`).
pub const TMA_SHARDS_MAX_PEERS: usize = 8;
/// The bytes of C++ `weft::TmaShards<T>`: the maps, then shard rows and columns (`u64`), the box (`u32` rows, `u32`
/// columns), the peers and this rank (`u32` each), the row stride in elements and each rank's address (`u64`: what
/// the `mma.sync` loop copies from), at 64-byte alignment.
const TMA_SHARDS_BYTES: usize = 1152;

/// A matrix sharded by rows over the LSA team, each rank's shard at the start of its part of a symmetric window,
/// described for TMA: what a kernel's `TmaShards<T>` parameter takes (the left operand of `x.gemm_tiles(&w)`, read
/// straight from its owners' windows: an all-gather fused into the GEMM's loads).
///
/// It holds one tensor map per LSA rank, each over that rank's part of the window (its address from
/// `ncclGetLsaDevicePointer`, NCCL 2.29+; this rank's own from its buffer, so one rank works on any release). The
/// maps are encoded once, when it is made, and each covers only `shard_rows × cols` of the part, `ld` elements
/// from row to row, checked to lie inside this rank's part: the window is symmetric, so every peer's part has the
/// same length and the map lets TMA read that peer's part and nothing else. The window stays borrowed for as long as
/// this lives, and each launch is recorded on it like a `&Window<T>` argument's (what deregistering it waits for).
pub struct TmaShards<'a, T> {
    window: &'a dyn super::buffers::sealed::SymmetricWindow<T>,
    matrix: TmaMatrix<T>,
    peers: usize,
    rank: usize,
    image: Box<[u8; TMA_SHARDS_BYTES]>,
}

impl<T> std::fmt::Debug for TmaShards<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TmaShards")
            .field("shard_rows", &self.matrix.rows)
            .field("cols", &self.matrix.cols)
            .field("ld", &self.matrix.ld)
            .field("peers", &self.peers)
            .field("rank", &self.rank)
            .finish()
    }
}

impl<'a, T: TmaElement + crate::Element> TmaShards<'a, T> {
    /// The left operand of `gemm_tiles` over `window`: every LSA rank's `shard_rows × cols` matrix (`m/R × k`) at
    /// the start of its part, `ld` elements from row to row, copied in the 128 × 64 boxes the loop's stages take.
    ///
    /// Errors name the fix: more than 8 LSA ranks, `shard_rows` not a positive multiple of 128 (a tile's rows must
    /// lie in one shard), a matrix past the window's end, TMA's rules ([`TmaMatrix::new`]), a released window, or
    /// NCCL older than 2.29 with more than one LSA rank ([`Error::Unsupported`]: use the `gemm_block` all-gather +
    /// GEMM, kit's `allgather_gemm`, there).
    pub fn gemm_a<M: crate::Mode>(
        window: &'a crate::resources::Window<'_, T, M>,
        shard_rows: usize,
        cols: usize,
        ld: usize,
    ) -> Result<TmaShards<'a, T>> {
        let team = window.communicator().team_lsa()?;
        let (peers, rank) = (usize::try_from(team.nranks()).unwrap_or(0), usize::try_from(team.rank()).unwrap_or(0));
        check_shards(peers, rank, shard_rows)?;
        let matrix = TmaMatrix::new(shard_rows, cols, ld, [128, 64])?;
        matrix.check_span(window.len())?;
        // The window must be live (not released by close_all_resources) for its addresses to mean anything.
        window.raw()?;
        let mut image = Box::new([0u8; TMA_SHARDS_BYTES]);
        for peer in 0..peers {
            let address = if peer == rank { window.buffer().device_address() } else { window.lsa_address(peer, 0)? };
            image[peer * 128..(peer + 1) * 128].copy_from_slice(&matrix.encode(address)?);
            image[1064 + 8 * peer..1072 + 8 * peer].copy_from_slice(&address.to_ne_bytes());
        }
        image[1024..1032].copy_from_slice(&(shard_rows as u64).to_ne_bytes());
        image[1032..1040].copy_from_slice(&(cols as u64).to_ne_bytes());
        image[1040..1044].copy_from_slice(&matrix.box_rows.to_ne_bytes());
        image[1044..1048].copy_from_slice(&matrix.box_cols.to_ne_bytes());
        // Both below TMA_SHARDS_MAX_PEERS (check_shards).
        image[1048..1052].copy_from_slice(&(peers as u32).to_ne_bytes());
        image[1052..1056].copy_from_slice(&(rank as u32).to_ne_bytes());
        image[1056..1064].copy_from_slice(&(ld as u64).to_ne_bytes());
        Ok(TmaShards { window, matrix, peers, rank, image })
    }
}

impl<'a, T> TmaShards<'a, T> {
    /// One shard's description (every rank's is the same).
    pub fn shard(&self) -> &TmaMatrix<T> {
        &self.matrix
    }

    /// The LSA ranks, one shard each.
    pub fn peers(&self) -> usize {
        self.peers
    }

    pub(crate) fn window(&self) -> &'a dyn super::buffers::sealed::SymmetricWindow<T> {
        self.window
    }

    /// The bytes of C++ `weft::TmaShards<T>`.
    pub(crate) fn kernel_image(&self) -> &[u8] {
        &self.image[..]
    }
}

/// Refuses shards a `TmaShards` cannot describe, naming the fix.
fn check_shards(peers: usize, rank: usize, shard_rows: usize) -> Result<()> {
    if peers == 0 || peers > TMA_SHARDS_MAX_PEERS || rank >= peers {
        return Err(Error::invalid(
            "window",
            format!(
                "its LSA team has {peers} ranks (this one {rank}): TmaShards holds a tensor map for each of at most \
                 {TMA_SHARDS_MAX_PEERS}; with more, use the gemm_block all-gather + GEMM (kit's allgather_gemm)"
            ),
        ));
    }
    if shard_rows == 0 || shard_rows % 128 != 0 {
        return Err(Error::invalid(
            "shard_rows",
            format!(
                "{shard_rows} rows per rank: gemm_tiles reads 128-row tiles, each from one rank's shard, so a shard \
                 is a positive multiple of 128 rows; pad the activations"
            ),
        ));
    }
    Ok(())
}

/// Threads per block of a kernel that opens `gemm_tiles` (weft.cuh's `GemmTiles::THREADS`).
pub const GEMM_TILES_THREADS: u32 = weft_device::GemmTiles::<weft_device::bf16>::THREADS;
/// The dynamic shared memory it needs with its most stages (Hopper's): four 48 KB stages, 1 KB to align them, eight
/// 8-byte barriers. Fewer stages need less ([`gemm_tiles_shared_bytes`]).
pub const GEMM_TILES_SHARED_BYTES: u32 = stages_bytes(weft_device::GemmTiles::<weft_device::bf16>::MAX_STAGES);

/// Dynamic shared memory for `stages` stages: the stages, 1 KB to align them to 1024 bytes, two 8-byte barriers
/// per stage (weft.cuh's `GemmTiles::SHARED_BYTES` of a kernel compiled for `stages`).
const fn stages_bytes(stages: u32) -> u32 {
    stages * weft_device::GemmTiles::<weft_device::bf16>::STAGE_BYTES + 1024 + 2 * stages * 8
}

/// The dynamic shared memory a kernel that opens `gemm_tiles` needs on `stream`'s GPU: its stages
/// ([`gemm_tiles_stages`](crate::jit::gemm_tiles_stages): 4 on Hopper, 3 on an A100, 2 where a block may have
/// 99 KB, or `WEFT_GEMM_TILES_STAGES`'), 1 KB to align them and two 8-byte barriers per stage. Refuses, naming the
/// fix, a GPU that runs no loop (below compute capability 8.0, or granting a block less than that) and a bad
/// `WEFT_GEMM_TILES_STAGES`.
pub fn gemm_tiles_shared_bytes(stream: &cudarc::driver::CudaStream) -> Result<u32> {
    let context = stream.context();
    let optin = context.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
    let capability = context.compute_capability()?;
    let stages = crate::jit::gemm_tiles_stages(capability)?;
    check_gemm_tiles_gpu(capability, optin, stages)
}

/// The launch of a kernel that opens `gemm_tiles` for an `m × n` product on `stream`'s GPU: one block of 384
/// threads per multiprocessor (fewer if there are fewer 128 × 256 tiles), each with the loop's shared memory
/// ([`gemm_tiles_shared_bytes`]). Refuses, naming the fix, a GPU that runs neither loop: below compute capability
/// 8.0, or with less shared memory per block than two stages.
pub fn gemm_tiles_config(stream: &cudarc::driver::CudaStream, m: usize, n: usize) -> Result<super::LaunchConfig> {
    gemm_tiles_config_with_sms(stream, m, n).map(|(cfg, _)| cfg)
}

/// [`gemm_tiles_config`] and the GPU's multiprocessor count it was sized with.
fn gemm_tiles_config_with_sms(
    stream: &cudarc::driver::CudaStream,
    m: usize,
    n: usize,
) -> Result<(super::LaunchConfig, u64)> {
    let shared = gemm_tiles_shared_bytes(stream)?;
    let context = stream.context();
    let sms = u64::try_from(context.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?)
        .unwrap_or(0)
        .max(1);
    let tiles = ((m / 128).max(1) * (n / 256).max(1)) as u64;
    let blocks = u32::try_from(tiles.min(sms)).unwrap_or(u32::MAX);
    Ok((super::LaunchConfig::linear(blocks, GEMM_TILES_THREADS).with_shared_mem(shared), sms))
}

/// [`gemm_tiles_config`] for a kernel whose blocks wait for their peers' blocks (an LSA barrier after the loop, as in
/// a GEMM + reduce-scatter): one block per multiprocessor of the rank's share of its GPU when ranks share it
/// ([`shared_gpu_share`](super::shared_gpu_share)), so that every rank's grid is resident at once; with one rank per
/// GPU the same as [`gemm_tiles_config`]. Every rank must launch the same grid: the ranks of one GPU get the same
/// share.
pub fn gemm_tiles_config_shared(
    comm: &impl super::GpuShare,
    stream: &cudarc::driver::CudaStream,
    m: usize,
    n: usize,
) -> Result<super::LaunchConfig> {
    let (cfg, sms) = gemm_tiles_config_with_sms(stream, m, n)?;
    let blocks = shared_gemm_tiles_blocks(sms, cfg.grid_dim.0, comm.ranks_on_gpu());
    Ok(super::LaunchConfig { grid_dim: (blocks, 1, 1), ..cfg })
}

/// The blocks of [`gemm_tiles_config_shared`]: at most `blocks` (one per tile, one per multiprocessor), and within
/// one rank's share of `sms` multiprocessors among `ranks_on_gpu` ranks, one block each (the loop's 193 KB of shared
/// memory and 384 threads of 168 registers leave room for no second one); never 0.
fn shared_gemm_tiles_blocks(sms: u64, blocks: u32, ranks_on_gpu: usize) -> u32 {
    let share = super::shared_gpu_share(sms, 1, ranks_on_gpu).max(1);
    u32::try_from(u64::from(blocks).min(share)).unwrap_or(u32::MAX).max(1)
}

/// Refuses a launch on `stream` of `kernel`, which opens `gemm_tiles`, with blocks other than 384 × 1 × 1 or less
/// dynamic shared memory than the loop's stages on that GPU ([`gemm_tiles_shared_bytes`]), before the device would
/// stop it. Either loop runs: TMA and `wgmma` where the kernel is compiled for sm_90a (unless
/// `WEFT_GEMM_MAINLOOP=mma_sync`), `cp.async` and `mma.sync` elsewhere.
pub fn check_gemm_tiles(
    kernel: &'static str,
    cfg: &super::LaunchConfig,
    stream: &cudarc::driver::CudaStream,
) -> Result<()> {
    let shared = gemm_tiles_shared_bytes(stream)?;
    check_gemm_tiles_launch(kernel, cfg, shared)
}

/// [`check_gemm_tiles`] where the loop needs `shared` bytes.
fn check_gemm_tiles_launch(kernel: &'static str, cfg: &super::LaunchConfig, shared: u32) -> Result<()> {
    if cfg.block_dim == (GEMM_TILES_THREADS, 1, 1) && cfg.shared_mem_bytes >= shared {
        return Ok(());
    }
    Err(Error::invalid(
        "cfg",
        format!(
            "`{kernel}` opens gemm_tiles, which runs blocks of exactly 384 threads in x (a loading warpgroup and two \
             multiplying ones) with {shared} bytes of dynamic shared memory on this GPU, but this launch has blocks \
             of {:?} and {} bytes: launch it with `weft::host::launch::gemm_tiles_config(stream, m, n)`",
            cfg.block_dim, cfg.shared_mem_bytes
        ),
    ))
}

/// The shared memory of the fewest stages the loop runs.
const TWO_STAGES_BYTES: u32 = stages_bytes(2);

/// The shared memory of `stages` stages, where a GPU of compute capability `capability` grants a block `optin`
/// bytes; refuses compute capability below 8.0 (no `mma.sync m16n8k16`, no `cp.async`) or too little shared memory
/// (Hopper grants 227 KB, an A100 163 KB, others 99 KB).
fn check_gemm_tiles_gpu(capability: (i32, i32), optin: i32, stages: u32) -> Result<u32> {
    let shared = stages_bytes(stages);
    let fits = u32::try_from(optin).is_ok_and(|bytes| bytes >= shared);
    if capability.0 >= 8 && fits {
        return Ok(shared);
    }
    Err(Error::invalid(
        "stream",
        format!(
            "gemm_tiles needs a GPU of compute capability 8.0 or newer that grants a block {shared} bytes of shared \
             memory (its {stages} stages), and this one is {}.{} with {optin}: use gemm_block (128 x 128 tiles in 48 \
             KB) or cuBLAS there{}",
            capability.0,
            capability.1,
            if capability.0 >= 8 && stages > 2 && optin >= 0 && optin.unsigned_abs() >= TWO_STAGES_BYTES {
                ", or fewer stages (WEFT_GEMM_TILES_STAGES=2)"
            } else {
                ""
            }
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn problem(result: Result<TmaMatrix<bf16>>) -> (String, String) {
        match result.unwrap_err() {
            Error::InvalidArgument { argument, problem } => (argument.to_string(), problem),
            other => panic!("not an InvalidArgument: {other:?}"),
        }
    }

    #[test]
    fn a_shared_gpu_gives_each_rank_one_block_per_multiprocessor_of_its_share() {
        // An H100's 132 multiprocessors: one rank takes them all (or one per tile, if fewer).
        assert_eq!(shared_gemm_tiles_blocks(132, 132, 1), 132);
        assert_eq!(shared_gemm_tiles_blocks(132, 8, 1), 8);
        // Several ranks: the multiprocessors NCCL's CTAs may take (4 per rank) set aside, the rest divided.
        assert_eq!(shared_gemm_tiles_blocks(132, 132, 2), 62);
        assert_eq!(shared_gemm_tiles_blocks(132, 132, 4), 29);
        assert_eq!(shared_gemm_tiles_blocks(132, 132, 8), 12);
        // Every rank's grid together, and NCCL's CTAs, fit on the GPU at one block per multiprocessor.
        for ranks in 1..=8usize {
            let blocks = u64::from(shared_gemm_tiles_blocks(132, 132, ranks));
            let reserve = if ranks > 1 { 4 * ranks as u64 } else { 0 };
            assert!(blocks * ranks as u64 + reserve <= 132, "{ranks} ranks: {blocks} blocks each");
        }
        // A small shape keeps its tile count; a GPU too small for the reserve still gets one block per rank.
        assert_eq!(shared_gemm_tiles_blocks(132, 6, 8), 6);
        assert_eq!(shared_gemm_tiles_blocks(16, 16, 8), 1);
    }

    #[test]
    fn a_matrix_is_checked_against_tmas_rules_and_each_error_names_what_to_change() {
        let ok = TmaMatrix::<bf16>::new(4096, 4096, 4096, [128, 64]).unwrap();
        assert_eq!((ok.rows(), ok.cols(), ok.ld(), ok.box_shape()), (4096, 4096, 4096, [128, 64]));
        assert_eq!((ok.box_bytes(), ok.elements_spanned()), (128 * 64 * 2, 4096 * 4096));
        // A sub-matrix of a wider one: the span ends at the last row's last column.
        let sub = TmaMatrix::<f16>::new(3, 16, 64, [8, 16]).unwrap();
        assert_eq!(sub.elements_spanned(), 2 * 64 + 16);
        for (result, argument, says) in [
            (TmaMatrix::new(0, 8, 8, [8, 8]), "rows", "empty"),
            (TmaMatrix::new(8, 16, 8, [8, 8]), "ld", "overlap"),
            (TmaMatrix::new(8, 12, 12, [8, 8]), "ld", "a multiple of 8"),
            (TmaMatrix::new(8, 8, 8, [0, 8]), "box", "1 to 256"),
            (TmaMatrix::new(8, 8, 8, [257, 8]), "box", "1 to 256"),
            (TmaMatrix::new(512, 512, 512, [64, 128]), "box", "up to 128"),
            (TmaMatrix::new(512, 512, 512, [64, 4]), "box", "8 to 64 columns"),
        ] {
            let (named, text) = problem(result);
            assert_eq!(named, argument, "{text}");
            assert!(text.contains(says), "{text}");
        }
    }

    #[test]
    fn a_gemm_tiles_launch_needs_384_threads_and_the_loops_shared_memory() {
        assert_eq!(GEMM_TILES_SHARED_BYTES, 197_696);
        for (stages, shared) in [(4, 197_696), (3, 148_528), (2, 99_360)] {
            let good = super::super::LaunchConfig::linear(132, 384).with_shared_mem(shared);
            assert!(check_gemm_tiles_launch("k", &good, shared).is_ok());
            assert_eq!(stages_bytes(stages), shared);
            for bad in [
                super::super::LaunchConfig::linear(132, 256).with_shared_mem(shared),
                super::super::LaunchConfig::linear(132, 384).with_shared_mem(shared - 8),
                super::super::LaunchConfig::linear(132, 384),
            ] {
                let text = check_gemm_tiles_launch("k", &bad, shared).unwrap_err().to_string();
                assert!(text.contains("gemm_tiles_config") && text.contains("384"), "{text}");
                assert!(text.contains(&format!("{shared} bytes")), "{text}");
            }
        }
        // Each GPU's stages fit what it grants a block: Hopper 227 KB, an A100 163 KB, an L40S or RTX 99 KB.
        assert_eq!(check_gemm_tiles_gpu((9, 0), 232_448, 4).unwrap(), 197_696);
        assert_eq!(check_gemm_tiles_gpu((8, 0), 166_912, 3).unwrap(), 148_528);
        assert_eq!(check_gemm_tiles_gpu((8, 9), 101_376, 2).unwrap(), 99_360);
        // Too little for the stages asked (a fewer-stage choice is named where it could fit), or a Turing GPU.
        for (capability, optin, stages, says) in [
            ((8, 0), 166_912, 4, "WEFT_GEMM_TILES_STAGES=2"),
            ((8, 9), 65_536, 2, "gemm_block"),
            ((8, 0), 65_536, 3, "148528"),
            ((7, 5), 65_536, 2, "7.5"),
        ] {
            let text = check_gemm_tiles_gpu(capability, optin, stages).unwrap_err().to_string();
            assert!(text.contains(says) && text.contains("gemm_block"), "{text}");
        }
    }

    #[test]
    fn shards_are_whole_tiles_on_at_most_eight_ranks() {
        assert!(check_shards(1, 0, 128).is_ok());
        assert!(check_shards(8, 7, 4096).is_ok());
        for (peers, rank, rows, argument, says) in [
            (9, 0, 128, "window", "at most 8"),
            (0, 0, 128, "window", "0 ranks"),
            (4, 4, 128, "window", "this one 4"),
            (2, 0, 0, "shard_rows", "positive multiple of 128"),
            (2, 1, 192, "shard_rows", "192 rows per rank"),
        ] {
            match check_shards(peers, rank, rows).unwrap_err() {
                Error::InvalidArgument { argument: named, problem } => {
                    assert_eq!(named, argument, "{problem}");
                    assert!(problem.contains(says), "{problem}");
                }
                other => panic!("not an InvalidArgument: {other:?}"),
            }
        }
        // The image's size is weft.cuh's `sizeof(TmaShards)`, which holds TMA_SHARDS_MAX_PEERS maps.
        let cuh = weft_device::WEFT_CUH;
        assert!(cuh.contains("sizeof(TmaShards<__nv_bfloat16>) == 1152"), "weft.cuh's layout of TmaShards changed");
        assert!(cuh.contains("offsetof(TmaShards<__nv_bfloat16>, addresses) == 1064"));
        assert!(cuh.contains("offsetof(TmaMatrix<__nv_bfloat16>, address_) == 152"));
        assert!(cuh.contains(&format!("MAX_PEERS = {TMA_SHARDS_MAX_PEERS};")));
        assert_eq!(TMA_SHARDS_BYTES, 1152);
    }

    #[test]
    fn an_unaligned_address_is_refused_before_the_driver_is_asked() {
        let a = TmaMatrix::<bf16>::new(64, 64, 64, [64, 64]).unwrap();
        let error = a.encode(0x1008).unwrap_err();
        assert!(error.to_string().contains("16-byte aligned"), "{error}");
    }
}
