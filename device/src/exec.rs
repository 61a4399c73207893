//! Execution: where this thread is, grid-stride loops, synchronisation, warp shuffles and reductions.
//!
//! Names follow `cuda_std` (Rust-CUDA) where it has one. One deliberate difference: [`index_1d`] returns `usize`
//! (computed in 64 bits), so it indexes slices directly.

use crate::device_only;
use crate::numeric::{Numeric, Shuffle};

/// Threads in a warp. C++ `weft::WARP_SIZE`.
pub const WARP_SIZE: u32 = 32;

macro_rules! builtin {
    ($($name:ident => $what:literal;)*) => {$(
        #[doc = concat!("This thread's ", $what, ". C++ `weft::", stringify!($name), "()`.")]
        pub fn $name() -> u32 {
            device_only(stringify!($name))
        }
    )*};
}

builtin! {
    thread_idx_x => "index within its block, x (`threadIdx.x`)";
    thread_idx_y => "index within its block, y (`threadIdx.y`)";
    thread_idx_z => "index within its block, z (`threadIdx.z`)";
    block_idx_x => "block's index within the grid, x (`blockIdx.x`)";
    block_idx_y => "block's index within the grid, y (`blockIdx.y`)";
    block_idx_z => "block's index within the grid, z (`blockIdx.z`)";
    block_dim_x => "block size, x (`blockDim.x`)";
    block_dim_y => "block size, y (`blockDim.y`)";
    block_dim_z => "block size, z (`blockDim.z`)";
    grid_dim_x => "grid size in blocks, x (`gridDim.x`)";
    grid_dim_y => "grid size in blocks, y (`gridDim.y`)";
    grid_dim_z => "grid size in blocks, z (`gridDim.z`)";
    lane_id => "lane within its warp, 0..32 (`%laneid`)";
    warp_id => "warp within its block: the linear thread index (x fastest) divided by 32";
}

/// This thread's index in a one-dimensional grid: `block_idx_x() * block_dim_x() + thread_idx_x()`, in 64 bits.
/// C++ `weft::index_1d()`.
pub fn index_1d() -> usize {
    device_only("index_1d")
}

/// Threads in a one-dimensional grid: `grid_dim_x() * block_dim_x()`, in 64 bits. C++ `weft::grid_size_1d()`.
pub fn grid_size_1d() -> usize {
    device_only("grid_size_1d")
}

/// The indices `index_1d(), index_1d() + grid_size_1d(), …` below `n`: a grid-stride loop.
///
/// ```
/// # use weft_device::prelude::*;
/// fn scale(x: &mut [f32], a: f32) {
///     for i in grid_stride(x.len()) {
///         x[i] *= a;
///     }
/// }
/// ```
///
/// The macro lowers `for i in grid_stride(n) { … }` to the plain C++ loop
/// `for (size_t i = weft::index_1d(); i < (size_t)(n); i += weft::grid_size_1d()) { … }` (rule R11);
/// `weft::grid_stride(n)` is also a C++ range, so `for (size_t i : weft::grid_stride(n))` compiles too.
pub fn grid_stride(n: usize) -> GridStride {
    device_only("grid_stride")
}

/// The iterator [`grid_stride`] returns. Only `for` loops use it; it has no other API.
#[derive(Debug)]
pub struct GridStride {
    _device_only: (),
}

impl Iterator for GridStride {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        device_only("grid_stride")
    }
}

/// Waits until every thread of the block reaches this point, and makes their shared and global memory writes
/// visible to each other (`__syncthreads()`). Every thread of the block must call it.
pub fn sync_threads() {
    device_only("sync_threads")
}

/// Waits until every lane of this warp reaches this point (`__syncwarp()`).
pub fn sync_warp() {
    device_only("sync_warp")
}

/// `value` from lane `src_lane` of this warp (`__shfl_sync(0xffffffff, value, src_lane)`). All 32 lanes must
/// call it.
pub fn shfl<T: Shuffle>(value: T, src_lane: u32) -> T {
    device_only("shfl")
}

/// `value` from lane `lane_id() ^ lane_mask` (`__shfl_xor_sync`). All 32 lanes must call it.
pub fn shfl_xor<T: Shuffle>(value: T, lane_mask: u32) -> T {
    device_only("shfl_xor")
}

/// `value` from lane `lane_id() + delta`, or this lane's own value where that is past the warp
/// (`__shfl_down_sync`). All 32 lanes must call it.
pub fn shfl_down<T: Shuffle>(value: T, delta: u32) -> T {
    device_only("shfl_down")
}

/// `value` from lane `lane_id() - delta`, or this lane's own value where that is below lane 0 (`__shfl_up_sync`).
/// All 32 lanes must call it.
pub fn shfl_up<T: Shuffle>(value: T, delta: u32) -> T {
    device_only("shfl_up")
}

/// A mask of the lanes of this warp whose `predicate` is true, bit `i` for lane `i`, returned to every lane
/// (`__ballot_sync(0xffffffff, predicate)`). All 32 lanes must call it. With [`u32::count_ones`] (`__popc`) it
/// counts, and with `ballot(p) & ((1 << lane_id()) - 1)` it ranks, a warp's lanes in one step.
pub fn ballot(predicate: bool) -> u32 {
    device_only("ballot")
}

/// A mask of the lanes of this warp whose `value` equals this lane's, bit `i` for lane `i`; each lane gets the mask
/// of its own group (`__match_any_sync(0xffffffff, value)`). All 32 lanes must call it. Groups a warp's lanes by key
/// (a destination rank, a bucket) in one step: a lane's rank in its group is
/// `(match_any(key) & ((1 << lane_id()) - 1)).count_ones()`.
pub fn match_any(value: u32) -> u32 {
    device_only("match_any")
}

/// The sum of `value` over the 32 lanes of this warp, returned to every lane. All 32 lanes must call it.
pub fn warp_reduce_sum<T: Numeric + Shuffle>(value: T) -> T {
    device_only("warp_reduce_sum")
}

/// The maximum of `value` over the 32 lanes of this warp, returned to every lane. All 32 lanes must call it.
pub fn warp_reduce_max<T: Numeric + Shuffle>(value: T) -> T {
    device_only("warp_reduce_max")
}

/// The minimum of `value` over the 32 lanes of this warp, returned to every lane. All 32 lanes must call it.
pub fn warp_reduce_min<T: Numeric + Shuffle>(value: T) -> T {
    device_only("warp_reduce_min")
}

/// The sum of `value` over every thread of the block, returned to every thread (RMSNorm's sum of squares).
///
/// Every thread of the block must call it; the block size must be a multiple of 32 (at most 1024). It uses 32
/// elements of shared memory of its own and synchronises the block twice, so it may be called again right away.
pub fn block_reduce_sum<T: Numeric + Shuffle>(value: T) -> T {
    device_only("block_reduce_sum")
}

/// The maximum of `value` over every thread of the block, returned to every thread. Same rules as
/// [`block_reduce_sum`].
pub fn block_reduce_max<T: Numeric + Shuffle>(value: T) -> T {
    device_only("block_reduce_max")
}

/// The minimum of `value` over every thread of the block, returned to every thread. Same rules as
/// [`block_reduce_sum`].
pub fn block_reduce_min<T: Numeric + Shuffle>(value: T) -> T {
    device_only("block_reduce_min")
}

/// Programmatic dependent launch: waits until the kernel launched before this one on the stream has finished and
/// its writes are visible (PTX `griddepcontrol.wait`). Call it before touching anything that kernel writes; what
/// comes before it (loading constants, computing addresses, reading inputs no earlier kernel writes) overlaps that
/// kernel's tail when this kernel was launched with `LaunchConfig::programmatic()`. Without that, a no-op.
pub fn pdl_wait() {
    device_only("pdl_wait")
}

/// Programmatic dependent launch: lets the kernel launched after this one on the stream (with
/// `LaunchConfig::programmatic()`) start before this one finishes, once every block of this kernel has called it or
/// exited (PTX `griddepcontrol.launch_dependents`). The dependent still sees this kernel's writes only after its
/// own [`pdl_wait`]. Without a programmatic dependent, a no-op.
pub fn pdl_launch_dependents() {
    device_only("pdl_launch_dependents")
}

/// Nanoseconds of the GPU's global timer (`%globaltimer`): for timeouts and coarse timing, not for ordering.
pub fn global_timer_ns() -> u64 {
    device_only("global_timer_ns")
}
