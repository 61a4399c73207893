//! Kernel launches: the launch geometry, the by-value argument structs of `docs/kernel-abi.md`, argument
//! packing, and the launch itself.
//!
//! `#[weft::kernel]` launchers fill a [`KernelArgs`] in the kernel's parameter order (from the sealed
//! [`KernelSlice`], [`KernelSliceMut`] and [`KernelWindow`] buffers only), check the kernel's bounds
//! ([`bounds`]) and call [`KernelArgs::launch`], which checks the arguments against the compiled kernel's
//! parameter list. Hand-written CUDA is launched with an [`ArgBuffer`] and [`launch_raw`] (`unsafe`).

use std::ffi::c_void;
use std::fmt;

use cudarc::driver::sys::CUfunction_attribute;
pub use cudarc::driver::CudaStream;
use cudarc::driver::{result as driver, CudaFunction, DevicePtr, DevicePtrMut, SyncOnDrop};

use crate::error::{Error, Result};

pub mod bounds;
pub(crate) mod buffers;
mod kernel_args;
mod params;
mod tma;
pub use buffers::{KernelSlice, KernelSliceMut, KernelWindow, NcclBuffer, NcclBufferMut};
pub use kernel_args::{check_block_of_256, length_check_failed, KernelArgs};
pub use params::ParamSlot;
pub use tma::{
    check_gemm_tiles, gemm_tiles_config, gemm_tiles_config_shared, gemm_tiles_shared_bytes, TmaBuffer, TmaElement,
    TmaMatrix, TmaOperand, TmaShards, GEMM_TILES_SHARED_BYTES, GEMM_TILES_THREADS, TMA_SHARDS_MAX_PEERS,
};

/// A `weft::Window<T>` kernel parameter: an NCCL window and the part of it the kernel sees.
///
/// Laid out like the C++ `{ ncclWindow_t win; size_t offset_bytes; size_t len; }`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowArg {
    /// The `ncclWindow_t` handle NCCL returned at registration.
    pub win: *mut c_void,
    /// Where the kernel's view starts, in bytes from the window's start.
    pub offset_bytes: usize,
    /// The number of elements in the view.
    pub len: usize,
}

/// A `weft::Slice<T>` or `weft::SliceMut<T>` kernel parameter: a device pointer and an element count.
///
/// Laid out like the C++ `{ T* ptr; size_t len; }`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SliceArg {
    /// The device address of the first element.
    pub ptr: u64,
    /// The number of elements.
    pub len: usize,
}

/// Threads per block the hardware allows.
pub const MAX_THREADS_PER_BLOCK: u64 = 1024;
const MAX_BLOCK_DIM: (u32, u32, u32) = (1024, 1024, 64);
const MAX_GRID_DIM: (u32, u32, u32) = (i32::MAX as u32, 65535, 65535);
/// Dynamic shared memory a kernel may use without opting in to more.
const DEFAULT_SHARED_MEM_LIMIT: u32 = 48 * 1024;

/// The geometry of a launch: blocks in the grid, threads per block, dynamic shared memory per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks in the grid, `(x, y, z)`.
    pub grid_dim: (u32, u32, u32),
    /// Threads per block, `(x, y, z)`.
    pub block_dim: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
    /// Programmatic dependent launch (PDL): the kernel may start while the previous kernel on its stream is still
    /// running, once every block of that kernel has called `pdl_launch_dependents()` or exited; it must call
    /// `pdl_wait()` before touching what the previous kernel writes (the vocabulary's §Execution). Refused where
    /// ranks share a GPU (a dependent kernel's early blocks would hold SMs its peers' blocks need). See
    /// [`LaunchConfig::programmatic`].
    pub programmatic: bool,
}

impl LaunchConfig {
    /// A one-dimensional launch of `grid_x` blocks of `block_x` threads, without dynamic shared memory.
    pub const fn linear(grid_x: u32, block_x: u32) -> LaunchConfig {
        LaunchConfig { grid_dim: (grid_x, 1, 1), block_dim: (block_x, 1, 1), shared_mem_bytes: 0, programmatic: false }
    }

    /// The same launch as a programmatic dependent launch (see the field [`programmatic`](Self::programmatic)):
    /// its prologue (everything before `pdl_wait()`) overlaps the previous kernel's tail.
    pub const fn programmatic(self) -> LaunchConfig {
        LaunchConfig { programmatic: true, ..self }
    }

    /// A one-dimensional launch with one thread per element: `ceil(n / block)` blocks of `block` threads.
    ///
    /// For kernels that sync with peers this is rarely the right shape: a kernel taking a barrier per block asks
    /// its device communicator for one barrier per block of this grid (weft warns above
    /// [`MANY_BARRIERS`](crate::devcomm::MANY_BARRIERS)). Grid-stride kernels run best as one wave
    /// ([`Communicator::one_wave`](crate::Communicator::one_wave)).
    ///
    /// The grid never drops below one block (a kernel with nothing to do still launches, and its grid-stride
    /// loops run zero times) nor exceeds the hardware's limit on `grid.x` (grid-stride loops cover the rest).
    pub fn for_elements(n: usize, block: u32) -> LaunchConfig {
        let blocks = if block == 0 { 1 } else { n.div_ceil(block as usize) };
        let grid_x = u32::try_from(blocks).unwrap_or(u32::MAX).clamp(1, MAX_GRID_DIM.0);
        LaunchConfig::linear(grid_x, block)
    }

    /// A one-dimensional launch of `block` threads per block with exactly as many blocks as the device runs at
    /// once for `function` (multiprocessors × resident blocks per multiprocessor): one full wave, the right
    /// shape for grid-stride kernels. A grid one block larger would run a second, nearly empty wave.
    ///
    /// This is the whole GPU for one rank. Ranks that share a GPU each get their part with
    /// [`Communicator::one_wave`](crate::Communicator::one_wave) (or [`LaunchConfig::one_wave_shared`]).
    pub fn one_wave(function: &CudaFunction, stream: &CudaStream, block: u32) -> Result<LaunchConfig> {
        LaunchConfig::one_wave_shared(function, stream, block, 1)
    }

    /// [`LaunchConfig::one_wave`] for one of `ranks_on_gpu` ranks sharing the stream's GPU: the wave divided among
    /// them (at least one block each), so that every rank's blocks are resident at once and blocks waiting at a
    /// barrier for a peer's blocks never wait for blocks that cannot be scheduled.
    pub fn one_wave_shared(
        function: &CudaFunction,
        stream: &CudaStream,
        block: u32,
        ranks_on_gpu: usize,
    ) -> Result<LaunchConfig> {
        let (sms, per_sm) = occupancy(function, stream, &LaunchConfig::linear(1, block))?;
        if sms * per_sm == 0 {
            return Err(Error::invalid(
                "block",
                format!("{block} threads per block do not fit on a multiprocessor for this kernel; use fewer"),
            ));
        }
        let share = shared_gpu_share(sms, per_sm, ranks_on_gpu).max(1);
        Ok(LaunchConfig::linear(u32::try_from(share).unwrap_or(u32::MAX), block))
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    pub const fn with_shared_mem(self, bytes: u32) -> LaunchConfig {
        LaunchConfig { shared_mem_bytes: bytes, ..self }
    }

    /// The number of blocks in the grid.
    pub fn grid_size(&self) -> u64 {
        u64::from(self.grid_dim.0) * u64::from(self.grid_dim.1) * u64::from(self.grid_dim.2)
    }

    /// The number of threads per block.
    pub fn block_size(&self) -> u64 {
        u64::from(self.block_dim.0) * u64::from(self.block_dim.1) * u64::from(self.block_dim.2)
    }

    /// Checks the limits every CUDA GPU shares: no zero dimension, at most 1024 threads per block (and
    /// `block.z ≤ 64`), `grid.x < 2³¹`, `grid.y, grid.z ≤ 65535`. Limits that depend on the device or the
    /// kernel (shared memory, registers) are left to the driver.
    pub fn validate(&self) -> Result<()> {
        let invalid = |problem: String| Err(Error::invalid("LaunchConfig", problem));
        let (grid, block) = (self.grid_dim, self.block_dim);
        if [grid.0, grid.1, grid.2].contains(&0) {
            return invalid(format!("grid {grid:?} has a zero dimension; every dimension must be at least 1"));
        }
        if [block.0, block.1, block.2].contains(&0) {
            return invalid(format!("block {block:?} has a zero dimension; every dimension must be at least 1"));
        }
        if self.block_size() > MAX_THREADS_PER_BLOCK {
            return invalid(format!(
                "block {block:?} has {} threads; CUDA allows at most {MAX_THREADS_PER_BLOCK} per block: use fewer \
                 threads per block and more blocks",
                self.block_size()
            ));
        }
        if block.0 > MAX_BLOCK_DIM.0 || block.1 > MAX_BLOCK_DIM.1 || block.2 > MAX_BLOCK_DIM.2 {
            return invalid(format!("block {block:?} exceeds the per-dimension limits {MAX_BLOCK_DIM:?}"));
        }
        if grid.0 > MAX_GRID_DIM.0 || grid.1 > MAX_GRID_DIM.1 || grid.2 > MAX_GRID_DIM.2 {
            return invalid(format!(
                "grid {grid:?} exceeds the per-dimension limits {MAX_GRID_DIM:?}: use fewer blocks (weft kernels \
                 loop over their elements, so a smaller grid still covers them)"
            ));
        }
        Ok(())
    }
}

/// How many ranks share a rank's GPU: what the geometry helpers need of a communicator (the generated modules'
/// `one_wave` takes any of these).
pub trait GpuShare {
    /// Ranks of the communicator on this rank's GPU, this one included.
    fn ranks_on_gpu(&self) -> usize;
}

impl<S: crate::comm::State, M: crate::comm::Mode> GpuShare for crate::Communicator<S, M> {
    fn ranks_on_gpu(&self) -> usize {
        crate::Communicator::ranks_on_gpu(self)
    }
}

impl<C: weft_device::caps::CapabilitySet, M: crate::comm::Mode> GpuShare for crate::DevComm<'_, C, M> {
    fn ranks_on_gpu(&self) -> usize {
        self.communicator().ranks_on_gpu()
    }
}

impl GpuShare for crate::Adopted {
    fn ranks_on_gpu(&self) -> usize {
        std::ops::Deref::deref(self).ranks_on_gpu()
    }
}

impl<S: crate::comm::Initialized, M: crate::comm::Mode> crate::Communicator<S, M> {
    /// One full wave of `function` for this rank: [`LaunchConfig::one_wave`] divided among the
    /// [`ranks_on_gpu`](crate::Communicator::ranks_on_gpu) ranks that share this rank's GPU, so that every rank's
    /// blocks are resident at once. With one rank per GPU it is the whole GPU.
    pub fn one_wave(&self, function: &CudaFunction, stream: &CudaStream, block: u32) -> Result<LaunchConfig> {
        LaunchConfig::one_wave_shared(function, stream, block, self.ranks_on_gpu())
    }
}

impl From<LaunchConfig> for cudarc::driver::LaunchConfig {
    fn from(cfg: LaunchConfig) -> Self {
        cudarc::driver::LaunchConfig {
            grid_dim: cfg.grid_dim,
            block_dim: cfg.block_dim,
            shared_mem_bytes: cfg.shared_mem_bytes,
        }
    }
}

/// The largest alignment [`ArgBuffer::push_bytes`] supports.
pub const MAX_ARG_ALIGN: usize = 64;

/// 64 bytes aligned to [`MAX_ARG_ALIGN`]; opaque argument bytes are stored in a run of these.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct AlignedChunk([u8; MAX_ARG_ALIGN]);

/// A kernel's arguments, packed for `cuLaunchKernel`: a copy of each value at its alignment in one
/// 64-byte-aligned arena, and the array of pointers into it.
///
/// Buffers added with [`ArgBuffer::slice_arg`] and friends are borrowed for `'a` and their stream
/// synchronization is completed when the `ArgBuffer` is dropped, so drop it only after [`launch_raw`].
pub struct ArgBuffer<'a> {
    // One allocation for every argument (launch overhead is host time: no per-argument boxes).
    arena: Vec<AlignedChunk>,
    used: usize,
    offsets: Vec<usize>,
    layouts: Vec<(usize, usize)>,
    params: Vec<*mut c_void>,
    guards: Vec<SyncOnDrop<'a>>,
}

impl fmt::Debug for ArgBuffer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArgBuffer")
            .field("layouts (size, align)", &self.layouts)
            .field("borrowed_buffers", &self.guards.len())
            .finish()
    }
}

impl Default for ArgBuffer<'_> {
    fn default() -> Self {
        ArgBuffer::new()
    }
}

/// Arguments most kernels have at most; only the capacity hint of the bookkeeping vectors.
const TYPICAL_ARGS: usize = 8;

impl<'a> ArgBuffer<'a> {
    /// An empty argument list.
    pub fn new() -> ArgBuffer<'a> {
        ArgBuffer {
            arena: vec![AlignedChunk([0; MAX_ARG_ALIGN]); 16],
            used: 0,
            offsets: Vec::with_capacity(TYPICAL_ARGS),
            layouts: Vec::with_capacity(TYPICAL_ARGS),
            params: Vec::with_capacity(TYPICAL_ARGS),
            guards: Vec::with_capacity(TYPICAL_ARGS),
        }
    }

    /// Room for `size` bytes at `align` (a power of two ≤ [`MAX_ARG_ALIGN`]); returns the slot's offset.
    fn slot(&mut self, size: usize, align: usize) -> usize {
        let offset = self.used.next_multiple_of(align);
        self.used = offset + size;
        let chunks = self.used.div_ceil(MAX_ARG_ALIGN);
        if chunks > self.arena.len() {
            self.arena.resize(chunks.max(2 * self.arena.len()), AlignedChunk([0; MAX_ARG_ALIGN]));
        }
        self.offsets.push(offset);
        self.layouts.push((size, align));
        offset
    }

    fn arena_ptr(&mut self) -> *mut u8 {
        self.arena.as_mut_ptr().cast()
    }

    /// Appends a by-value argument: a scalar, [`SliceArg`], [`WindowArg`] or another `#[repr(C)]` value laid
    /// out exactly like the kernel's parameter.
    ///
    /// # Panics
    /// If `T` is zero-sized or aligned to more than [`MAX_ARG_ALIGN`]: no C++ parameter is, so such a push is a
    /// bug in the caller.
    pub fn push<T: Copy + 'static>(&mut self, value: T) {
        let (size, align) = (std::mem::size_of::<T>(), std::mem::align_of::<T>());
        assert!(size != 0, "kernel arguments cannot be zero-sized");
        assert!(align <= MAX_ARG_ALIGN, "kernel arguments are aligned to at most {MAX_ARG_ALIGN} bytes");
        let offset = self.slot(size, align);
        // SAFETY: `slot` made `offset..offset + size` part of the arena and aligned it for `T` (the arena is
        // 64-byte aligned and `align` ≤ 64); `T: Copy`, so a bitwise copy is a valid copy of the value.
        unsafe { std::ptr::write(self.arena_ptr().add(offset).cast::<T>(), value) };
    }

    /// Appends an argument given as raw bytes with the alignment of its C++ type: NCCL's `ncclDevComm`, whose
    /// layout weft does not mirror. `align` must be a power of two no larger than [`MAX_ARG_ALIGN`].
    pub fn push_bytes(&mut self, bytes: &[u8], align: usize) -> Result<()> {
        if bytes.is_empty() {
            return Err(Error::invalid("bytes", "a kernel argument cannot be empty"));
        }
        if !align.is_power_of_two() || align > MAX_ARG_ALIGN {
            return Err(Error::invalid(
                "align",
                format!("{align} is not a power of two no larger than {MAX_ARG_ALIGN}; pass the C++ type's alignof"),
            ));
        }
        let offset = self.slot(bytes.len(), align);
        // SAFETY: `slot` made `offset..offset + bytes.len()` part of the arena, which `bytes` cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.arena_ptr().add(offset), bytes.len()) };
        Ok(())
    }

    /// The [`SliceArg`] for reading `buffer` in a kernel launched on `stream`; `stream` first waits for pending
    /// writes to `buffer`, and the read is recorded when this `ArgBuffer` is dropped.
    ///
    /// Fails if `buffer` belongs to another CUDA context than `stream`.
    pub fn slice_arg<T>(&mut self, buffer: &'a impl DevicePtr<T>, stream: &'a CudaStream) -> Result<SliceArg> {
        check_same_context(buffer.stream(), stream)?;
        let len = buffer.len();
        let (ptr, guard) = buffer.device_ptr(stream);
        self.guards.push(guard);
        Ok(SliceArg { ptr, len })
    }

    /// The [`SliceArg`] for writing `buffer` in a kernel launched on `stream`; `stream` first waits for pending
    /// reads and writes of `buffer`, and the write is recorded when this `ArgBuffer` is dropped.
    ///
    /// Fails if `buffer` belongs to another CUDA context than `stream`.
    pub fn slice_arg_mut<T>(
        &mut self,
        buffer: &'a mut impl DevicePtrMut<T>,
        stream: &'a CudaStream,
    ) -> Result<SliceArg> {
        check_same_context(buffer.stream(), stream)?;
        let len = buffer.len();
        let (ptr, guard) = buffer.device_ptr_mut(stream);
        self.guards.push(guard);
        Ok(SliceArg { ptr, len })
    }

    /// Appends the `CUtensorMap` of `matrix` over `buffer` (its 128 bytes, at 64-byte alignment: a kernel's
    /// `const __grid_constant__ CUtensorMap` parameter), for a kernel on `stream` that reads `buffer` through TMA;
    /// the read is recorded like [`ArgBuffer::slice_arg`]'s.
    ///
    /// Fails if `buffer` belongs to another CUDA context than `stream`, holds fewer elements than `matrix` spans
    /// ([`TmaMatrix::elements_spanned`]), or does not start on a 16-byte boundary: the map would let TMA read
    /// outside it.
    pub fn push_tma_matrix<T: TmaElement>(
        &mut self,
        buffer: &'a impl DevicePtr<T>,
        matrix: &TmaMatrix<T>,
        stream: &'a CudaStream,
    ) -> Result<()> {
        matrix.check_span(buffer.len())?;
        let arg = self.slice_arg(buffer, stream)?;
        let map = matrix.encode(arg.ptr)?;
        self.push_bytes(&map, MAX_ARG_ALIGN)
    }

    /// Appends `buffer` as a `weft::Slice<T>` argument (see [`ArgBuffer::slice_arg`]).
    pub fn push_slice<T>(&mut self, buffer: &'a impl DevicePtr<T>, stream: &'a CudaStream) -> Result<()> {
        let arg = self.slice_arg(buffer, stream)?;
        self.push(arg);
        Ok(())
    }

    /// Appends `buffer` as a `weft::SliceMut<T>` argument (see [`ArgBuffer::slice_arg_mut`]).
    pub fn push_slice_mut<T>(&mut self, buffer: &'a mut impl DevicePtrMut<T>, stream: &'a CudaStream) -> Result<()> {
        let arg = self.slice_arg_mut(buffer, stream)?;
        self.push(arg);
        Ok(())
    }

    /// The number of arguments.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Whether no argument was pushed.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// `(size, align)` of each argument, in order.
    pub fn layouts(&self) -> &[(usize, usize)] {
        &self.layouts
    }

    /// Where each argument starts in this buffer's arena, in bytes (each at the next multiple of its alignment).
    /// The kernel's own parameter buffer may place them elsewhere (the driver copies each argument through
    /// [`kernel_params`](Self::kernel_params) to its own offset): on Hopper a first parameter aligned to 64 bytes
    /// sits at offset 48.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Keeps a buffer's synchronization guard until this `ArgBuffer` is dropped (after the launch).
    pub(crate) fn keep(&mut self, guard: SyncOnDrop<'a>) {
        self.guards.push(guard);
    }

    /// The `void** kernelParams` of `cuLaunchKernel`: one pointer per argument, to this buffer's copy of it.
    /// The pointers are valid while `self` is neither dropped nor modified.
    pub fn kernel_params(&mut self) -> &mut [*mut c_void] {
        let base = self.arena_ptr();
        self.params.clear();
        // `wrapping_add` keeps this safe code; every offset is inside the arena, so the pointers are in bounds.
        self.params.extend(self.offsets.iter().map(|&offset| base.wrapping_add(offset).cast::<c_void>()));
        &mut self.params
    }
}

/// How many blocks of `function` with `cfg`'s block size and dynamic shared memory the stream's GPU holds at once
/// (multiprocessors × blocks per multiprocessor). Asked of the driver once per function and shape, then remembered.
pub fn resident_blocks(function: &CudaFunction, stream: &CudaStream, cfg: &LaunchConfig) -> Result<u64> {
    let (sms, per_sm) = occupancy(function, stream, cfg)?;
    Ok(sms * per_sm)
}

/// One rank's share of a GPU of `sms` multiprocessors holding `per_sm` blocks each, when `ranks_on_gpu` ranks share
/// it: the blocks it may launch so that its grid and every peer's grid of the same shape are resident at once, next
/// to the NCCL kernels the ranks may be running meanwhile. With one rank, the whole GPU. Their kernels that wait at barriers for each other must all be resident at once, but they are not alone on
/// the GPU: a rank that got ahead runs an NCCL kernel meanwhile (up to
/// [`SHARED_GPU_MAX_CTAS`](crate::placement::SHARED_GPU_MAX_CTAS) CTAs per rank, each of which may leave no room for
/// a weft block on its multiprocessor). So the multiprocessors those CTAs could take are set aside first, then the
/// rest divided among the ranks. Dividing the whole GPU exactly hung at 8 ranks on an H200 (docs/multi-rank.md).
pub fn shared_gpu_share(sms: u64, per_sm: u64, ranks_on_gpu: usize) -> u64 {
    let ranks = ranks_on_gpu.max(1) as u64;
    if ranks == 1 {
        return sms * per_sm;
    }
    let reserved = ranks * crate::placement::SHARED_GPU_MAX_CTAS.unsigned_abs() as u64;
    // Never below one multiprocessor: a GPU too small for the reserve still gives each rank what it can.
    let usable = sms.saturating_sub(reserved).max(1);
    usable * per_sm / ranks
}

/// The stream's multiprocessors, and how many blocks of `function` with `cfg`'s shape each holds. Asked of the
/// driver once per function and shape, then remembered.
pub(crate) fn occupancy(function: &CudaFunction, stream: &CudaStream, cfg: &LaunchConfig) -> Result<(u64, u64)> {
    use std::collections::HashMap;
    use std::sync::{Mutex, PoisonError};
    type Shape = (usize, u64, u32, usize);
    // Multiprocessors, blocks per multiprocessor; and the function, which each entry keeps (with its module)
    // alive, so a handle in the table is never reused by another function while it is remembered.
    type Known = ((u64, u64), CudaFunction);
    static KNOWN: Mutex<Option<HashMap<Shape, Known>>> = Mutex::new(None);
    let context = stream.context();
    let key: Shape = (function.cu_function() as usize, cfg.block_size(), cfg.shared_mem_bytes, context.ordinal());
    let known = KNOWN.lock().unwrap_or_else(PoisonError::into_inner).as_ref().and_then(|m| m.get(&key).map(|e| e.0));
    if let Some(found) = known {
        return Ok(found);
    }
    let sms = context.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let block = u32::try_from(cfg.block_size()).unwrap_or(u32::MAX);
    // The driver judges a block's dynamic shared memory against the function's allowance (48 KB until raised), so
    // the allowance is raised first, as for the launch: asked before, the answer for `gemm_tiles`' 193 KB can be 0
    // blocks, and the co-residency check would refuse a grid that fits.
    context.bind_to_thread()?;
    allow_dynamic_shared(function, cfg.shared_mem_bytes)?;
    let per_sm = function.occupancy_max_active_blocks_per_multiprocessor(block, cfg.shared_mem_bytes as usize, None)?;
    let found = (u64::try_from(sms).unwrap_or(0), u64::from(per_sm));
    KNOWN
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(key, (found, function.clone()));
    Ok(found)
}

/// Lets `function` take `bytes` of dynamic shared memory per block where that is above the 48 KB every function may
/// take (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`); more than the GPU has is the driver's error.
fn allow_dynamic_shared(function: &CudaFunction, bytes: u32) -> Result<()> {
    if bytes > DEFAULT_SHARED_MEM_LIMIT {
        let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
        function.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)?;
    }
    Ok(())
}

pub(crate) fn check_same_context(buffer_stream: &CudaStream, stream: &CudaStream) -> Result<()> {
    let (ours, theirs) = (stream.context(), buffer_stream.context());
    if ours == theirs {
        return Ok(());
    }
    Err(Error::invalid(
        "buffer",
        format!(
            "it was allocated in the CUDA context of device {} but the kernel is launched on a stream of device {}; \
             copy it to the launch stream's device first",
            theirs.ordinal(),
            ours.ordinal()
        ),
    ))
}

/// Launches `func` on `stream` with `cfg` and the arguments in `args`.
///
/// Checks `cfg` (see [`LaunchConfig::validate`]) and raises the function's dynamic shared memory limit when
/// `cfg` asks for more than the default 48 KiB. The launch is asynchronous; errors of the kernel itself surface
/// at a later synchronization.
///
/// # Safety
/// - `args` holds exactly `func`'s parameters: the same count, in order, each with the size and layout of the
///   C++ parameter type (`SliceArg` for `weft::Slice<T>`, `WindowArg` for `weft::Window<T>`, NCCL's own bytes for
///   `ncclDevComm`, the mapped scalar otherwise). The driver copies `size` bytes per parameter from `args`
///   whatever they hold.
/// - `func` was loaded into the CUDA context that `stream` belongs to.
/// - If `func` is a weft kernel's [`ArgAlignment::Aligned16`](crate::jit::ArgAlignment) form (what
///   [`crate::jit::function`] returns), every slice pointer and window byte offset is a multiple of 16.
/// - Every device address passed (slices, windows, the device communicator's internals) stays allocated and
///   registered until the kernel has finished: no window is deregistered, no device communicator destroyed and
///   no buffer freed before `stream` passes this launch. Buffers added through [`ArgBuffer::slice_arg`] meet this
///   if `args` is dropped after this call (cudarc then orders their frees and later writes after the kernel).
/// - The kernel only accesses memory the arguments describe, and no other work writes what it reads or reads what
///   it writes while it runs unless the kernel's own synchronization (barriers, signals) orders them.
pub unsafe fn launch_raw(
    func: &CudaFunction,
    stream: &CudaStream,
    cfg: &LaunchConfig,
    args: &mut ArgBuffer<'_>,
) -> Result<()> {
    cfg.validate()?;
    stream.context().bind_to_thread()?;
    allow_dynamic_shared(func, cfg.shared_mem_bytes)?;
    let params = args.kernel_params();
    if cfg.programmatic {
        return launch_programmatic(func, stream, cfg, params);
    }
    // SAFETY: `func` and `stream` are live handles of one context (caller's precondition), now bound to this
    // thread; `params` holds one pointer per argument into `args`' own aligned copies, which outlive this call
    // because `args` is borrowed for all of it and the driver copies the parameters before returning; the
    // arguments match the kernel's parameter list and the memory they reference stays valid until the kernel
    // finishes (both caller's preconditions).
    unsafe {
        driver::launch_kernel(
            func.cu_function(),
            cfg.grid_dim,
            cfg.block_dim,
            cfg.shared_mem_bytes,
            stream.cu_stream(),
            params,
        )
    }?;
    Ok(())
}

/// `cuLaunchKernelEx` with the programmatic-stream-serialization attribute (PDL).
fn launch_programmatic(
    func: &CudaFunction,
    stream: &CudaStream,
    cfg: &LaunchConfig,
    params: &mut [*mut std::ffi::c_void],
) -> Result<()> {
    use cudarc::driver::sys;
    // SAFETY: an all-zero launch attribute value is a valid bit pattern (a C union of plain integers and structs).
    let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.programmaticStreamSerializationAllowed = 1;
    let mut attribute = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attribute,
        numAttrs: 1,
    };
    // SAFETY: as `launch_raw`'s driver call (the caller of `launch_raw` gave the same guarantees), plus `config` and
    // its one attribute, which live on this frame for the whole call (the driver reads them before returning).
    unsafe { sys::cuLaunchKernelEx(&config, func.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) }
        .result()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::mem::{align_of, offset_of, size_of};

    use super::*;

    #[test]
    fn abi_structs_match_their_cpp_layouts() {
        assert_eq!((size_of::<SliceArg>(), align_of::<SliceArg>()), (16, 8));
        assert_eq!((offset_of!(SliceArg, ptr), offset_of!(SliceArg, len)), (0, 8));
        assert_eq!((size_of::<WindowArg>(), align_of::<WindowArg>()), (24, 8));
        assert_eq!(
            (offset_of!(WindowArg, win), offset_of!(WindowArg, offset_bytes), offset_of!(WindowArg, len)),
            (0, 8, 16)
        );
    }

    #[test]
    fn ranks_sharing_a_gpu_split_what_nccls_ctas_leave() {
        // One rank: the whole GPU. H200 (132 SMs): 4 CTAs per rank set aside, the rest divided.
        assert_eq!(shared_gpu_share(132, 2, 1), 264);
        assert_eq!(shared_gpu_share(132, 2, 2), 124);
        assert_eq!(shared_gpu_share(132, 2, 8), 25);
        assert_eq!(shared_gpu_share(132, 4, 8), 50);
        // Every rank's share and every rank's NCCL CTAs fit on the GPU at once, one SM per CTA.
        for ranks in 2..=8 {
            for per_sm in 1..=8 {
                let share = shared_gpu_share(132, per_sm, ranks);
                let ctas = ranks as u64 * crate::placement::SHARED_GPU_MAX_CTAS as u64;
                assert!(share * ranks as u64 <= (132 - ctas) * per_sm, "{ranks} ranks, {per_sm} per SM");
            }
        }
        // A GPU smaller than the reserve still gives something (one SM's worth, divided; `one_wave` makes it ≥ 1).
        assert_eq!(shared_gpu_share(16, 4, 8), 0);
        assert_eq!(shared_gpu_share(16, 16, 8), 2);
    }

    #[test]
    fn gemm_kernels_take_blocks_of_exactly_256_threads() {
        assert!(check_block_of_256("g", &LaunchConfig::linear(3, 256)).is_ok());
        for cfg in [LaunchConfig::linear(1, 128), LaunchConfig { block_dim: (128, 2, 1), ..LaunchConfig::linear(1, 1) }]
        {
            match check_block_of_256("g", &cfg) {
                Err(Error::InvalidArgument { argument: "cfg", problem }) => {
                    assert!(problem.contains("`g` calls gemm_block"), "{problem}");
                    assert!(problem.contains("exactly 256 threads"), "{problem}");
                    assert!(problem.contains(&format!("{:?}", cfg.block_dim)), "{problem}");
                }
                other => panic!("{cfg:?} was not refused: {other:?}"),
            }
        }
    }

    #[test]
    fn configs_are_built_and_measured() {
        let cfg = LaunchConfig::linear(4, 256).with_shared_mem(1024);
        assert_eq!((cfg.grid_dim, cfg.block_dim, cfg.shared_mem_bytes), ((4, 1, 1), (256, 1, 1), 1024));
        assert_eq!((cfg.grid_size(), cfg.block_size()), (4, 256));
        assert!(!cfg.programmatic && cfg.programmatic().programmatic, "PDL only when asked for");
        assert_eq!(cfg.programmatic().grid_dim, cfg.grid_dim);
        assert_eq!(LaunchConfig::for_elements(1000, 256).grid_dim, (4, 1, 1));
        assert_eq!(LaunchConfig::for_elements(1024, 256).grid_dim, (4, 1, 1));
        assert_eq!(LaunchConfig::for_elements(0, 256).grid_dim, (1, 1, 1), "an empty launch still has one block");
        assert_eq!(LaunchConfig::for_elements(usize::MAX, 32).grid_dim, (MAX_GRID_DIM.0, 1, 1));
        assert_eq!(LaunchConfig { grid_dim: (65535, 65535, 65535), ..cfg }.grid_size(), 65535u64.pow(3));
        let cudarc: cudarc::driver::LaunchConfig = cfg.into();
        assert_eq!((cudarc.grid_dim, cudarc.block_dim, cudarc.shared_mem_bytes), (cfg.grid_dim, cfg.block_dim, 1024));
    }

    #[test]
    fn invalid_configs_are_refused_with_the_fix() {
        assert!(LaunchConfig::linear(1, 1024).validate().is_ok());
        assert!(LaunchConfig {
            grid_dim: (MAX_GRID_DIM.0, 65535, 65535),
            block_dim: (32, 32, 1),
            ..LaunchConfig::linear(1, 1)
        }
        .validate()
        .is_ok());
        let refused = |cfg: LaunchConfig, needle: &str| {
            let text = cfg.validate().unwrap_err().to_string();
            assert!(text.contains("LaunchConfig") && text.contains(needle), "{text}");
        };
        refused(LaunchConfig::linear(0, 128), "at least 1");
        refused(LaunchConfig::linear(1, 0), "at least 1");
        refused(LaunchConfig::for_elements(10, 0), "at least 1");
        refused(LaunchConfig::linear(1, 1025), "use fewer threads per block");
        refused(LaunchConfig { block_dim: (32, 32, 2), ..LaunchConfig::linear(1, 1) }, "2048 threads");
        refused(LaunchConfig { block_dim: (1, 1, 128), ..LaunchConfig::linear(1, 1) }, "per-dimension");
        refused(LaunchConfig { grid_dim: (1, 65536, 1), ..LaunchConfig::linear(1, 1) }, "use fewer blocks");
        refused(LaunchConfig::linear(u32::MAX, 1), "use fewer blocks");
    }

    /// Reads back argument `i` as a `T`, checking the pointer is aligned for it.
    fn read_arg<T: Copy>(args: &mut ArgBuffer<'_>, i: usize) -> T {
        let ptr = args.kernel_params()[i].cast::<T>();
        assert_eq!(ptr as usize % align_of::<T>(), 0, "argument {i} is misaligned");
        // SAFETY: argument `i` was pushed as a `T` (each test pushes and reads back the same types), the pointer
        // is aligned (checked above) and points into `args`, which is borrowed for this whole call.
        unsafe { ptr.read() }
    }

    #[test]
    fn values_are_copied_into_aligned_storage_in_order() {
        #[repr(C, align(16))]
        #[derive(Clone, Copy, Debug, PartialEq)]
        struct Wide([u32; 4]);
        let window = WindowArg { win: 0xdead_0000 as *mut c_void, offset_bytes: 64, len: 3 };
        let mut args = ArgBuffer::new();
        args.push(7u8);
        args.push(2.5f64);
        args.push(SliceArg { ptr: 0x1000, len: 10 });
        args.push(-3i16);
        args.push(window);
        args.push(Wide([1, 2, 3, 4]));
        args.push(half::bf16::from_f32(1.5));
        assert_eq!(args.len(), 7);
        assert_eq!(args.layouts(), &[(1, 1), (8, 8), (16, 8), (2, 2), (24, 8), (16, 16), (2, 2)]);
        // The offsets of a C parameter list of these types (each at the next multiple of its alignment): what
        // `cuFuncGetParamInfo` reports for the compiled kernel and `KernelArgs::launch` compares.
        assert_eq!(args.offsets(), &[0, 8, 16, 32, 40, 64, 80]);
        assert_eq!(read_arg::<u8>(&mut args, 0), 7);
        assert_eq!(read_arg::<f64>(&mut args, 1), 2.5);
        assert_eq!(read_arg::<SliceArg>(&mut args, 2), SliceArg { ptr: 0x1000, len: 10 });
        assert_eq!(read_arg::<i16>(&mut args, 3), -3);
        assert_eq!(read_arg::<WindowArg>(&mut args, 4), window);
        assert_eq!(read_arg::<Wide>(&mut args, 5), Wide([1, 2, 3, 4]));
        assert_eq!(read_arg::<half::bf16>(&mut args, 6).to_f32(), 1.5);
        let params = args.kernel_params().to_vec();
        assert_eq!(params, args.kernel_params().to_vec(), "pointers are stable across calls");
    }

    #[test]
    fn opaque_bytes_keep_their_content_and_alignment() {
        let bytes: Vec<u8> = (0..150u8).collect();
        let mut args = ArgBuffer::new();
        args.push(1u8);
        args.push_bytes(&bytes, 16).unwrap();
        args.push_bytes(&[9], 64).unwrap();
        assert_eq!(args.layouts(), &[(1, 1), (150, 16), (1, 64)]);
        let params = args.kernel_params().to_vec();
        assert_eq!(params[1] as usize % 16, 0);
        assert_eq!(params[2] as usize % 64, 0);
        // SAFETY: argument 1 was pushed as 150 bytes; the pointer addresses this buffer's copy of them, which
        // lives (unmodified) as long as `args`.
        let copied = unsafe { std::slice::from_raw_parts(params[1].cast::<u8>(), bytes.len()) };
        assert_eq!(copied, bytes.as_slice());
    }

    #[test]
    fn bad_byte_arguments_are_refused() {
        let mut args = ArgBuffer::new();
        for align in [0, 3, 128] {
            let text = args.push_bytes(&[1, 2, 3, 4], align).unwrap_err().to_string();
            assert!(text.contains("alignof"), "{text}");
        }
        assert!(args.push_bytes(&[], 8).is_err());
        assert!(args.is_empty());
    }

    #[test]
    #[should_panic(expected = "zero-sized")]
    fn zero_sized_arguments_are_a_bug() {
        ArgBuffer::new().push(());
    }
}
