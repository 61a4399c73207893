//! Reduce-copy helpers: sum or copy whole ranges across LSA peers or local buffers, vectorised.
//!
//! The work is split among the threads of the `coop` only: a block-wide (`Cta`) call processes all `count`
//! elements with that block's threads. To spread a range over the grid, give each block its own part
//! (`src.offset(start)`, `&out[start..]`). With NCCL 2.32+ headers these are NCCL's own helpers
//! (`nccl_device/reduce_copy.h`); with 2.28 they are plain loops in `weft.cuh` with the same results.

use crate::caps::HasLsa;
use crate::comm::DevComm;
use crate::coop::Coop;
use crate::device_only;
use crate::numeric::Numeric;
use crate::window::Window;

impl<C: HasLsa> DevComm<C> {
    /// `dst[i] = Σ over LSA peers p of src.lsa(p)[i]` for `i < count` (`ncclLsaReduceSum`).
    /// C++ `dev.lsa_reduce_sum(coop, src, dst, count)`.
    pub fn lsa_reduce_sum<T: Numeric, Co: Coop>(&self, coop: Co, src: &Window<T>, dst: &mut [T], count: usize) {
        device_only("DevComm::lsa_reduce_sum")
    }

    /// `dst.lsa(p)[i] = src[i]` for every LSA peer `p` and `i < count`: a broadcast of local data into every
    /// peer's window (`ncclLsaCopy`). C++ `dev.lsa_copy(coop, src, dst, count)`.
    pub fn lsa_copy<T: Numeric, Co: Coop>(&self, coop: Co, src: &[T], dst: &Window<T>, count: usize) {
        device_only("DevComm::lsa_copy")
    }

    /// `dst.lsa(q)[i] = Σ_p src.lsa(p)[i]` for every LSA peer `q` and `i < count`: an all-reduce of the range
    /// when each rank handles its own share (`ncclLsaReduceSumCopy`).
    /// C++ `dev.lsa_reduce_sum_copy(coop, src, dst, count)`.
    pub fn lsa_reduce_sum_copy<T: Numeric, Co: Coop>(&self, coop: Co, src: &Window<T>, dst: &Window<T>, count: usize) {
        device_only("DevComm::lsa_reduce_sum_copy")
    }
}

/// `dst[i] = Σ_{k < src_count} src[k * src_stride + i]` for `i < count` (`ncclLocalReduceSum`).
/// C++ `weft::local_reduce_sum(coop, src, src_count, src_stride, dst, count)`.
pub fn local_reduce_sum<T: Numeric, Co: Coop>(
    coop: Co,
    src: &[T],
    src_count: u32,
    src_stride: usize,
    dst: &mut [T],
    count: usize,
) {
    device_only("local_reduce_sum")
}

/// `dst[k * dst_stride + i] = src[i]` for `k < dst_count`, `i < count` (`ncclLocalCopy`).
/// C++ `weft::local_copy(coop, src, dst, dst_count, dst_stride, count)`.
pub fn local_copy<T: Numeric, Co: Coop>(
    coop: Co,
    src: &[T],
    dst: &mut [T],
    dst_count: u32,
    dst_stride: usize,
    count: usize,
) {
    device_only("local_copy")
}

/// `dst[j * dst_stride + i] = Σ_{k < src_count} src[k * src_stride + i]` for `j < dst_count`, `i < count`
/// (`ncclLocalReduceSumCopy`).
/// C++ `weft::local_reduce_sum_copy(coop, src, src_count, src_stride, dst, dst_count, dst_stride, count)`.
#[allow(clippy::too_many_arguments)]
pub fn local_reduce_sum_copy<T: Numeric, Co: Coop>(
    coop: Co,
    src: &[T],
    src_count: u32,
    src_stride: usize,
    dst: &mut [T],
    dst_count: u32,
    dst_stride: usize,
    count: usize,
) {
    device_only("local_reduce_sum_copy")
}
