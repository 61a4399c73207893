//! Multimem: NVLink SHARP multicast addresses of a window on the LSA team (needs `C: HasMultimem`).
//!
//! A load through a multicast address reduces over every LSA peer's copy in the switch; a store or reduction
//! through it reaches every copy. The element-wise view is [`MultimemView`]; whole ranges go through the
//! reduce-copy methods below.

use core::marker::PhantomData;

use crate::caps::HasMultimem;
use crate::comm::DevComm;
use crate::coop::Coop;
use crate::device_only;
use crate::numeric::{MultimemElement, MultimemStore, Numeric};
use crate::window::Window;

/// The multicast view of a window (`ncclGetLsaMultimemPointer`). C++ `weft::MultimemView<T>`.
#[derive(Debug)]
pub struct MultimemView<'w, T> {
    _window: PhantomData<&'w Window<T>>,
}

impl<C: HasMultimem> DevComm<C> {
    /// The multicast view of `window` over the LSA team. C++ `dev.lsa_multimem(window)`.
    pub fn lsa_multimem<'w, T: MultimemElement>(&self, window: &'w Window<T>) -> MultimemView<'w, T> {
        device_only("DevComm::lsa_multimem")
    }

    /// `dst[i] = Σ_p src.lsa(p)[i]` for `i < count`, the sum done by the switch (`ncclMultimemReduceSum`).
    /// C++ `dev.multimem_reduce_sum(coop, src, dst, count)`.
    pub fn multimem_reduce_sum<T: MultimemElement, Co: Coop>(
        &self,
        coop: Co,
        src: &Window<T>,
        dst: &mut [T],
        count: usize,
    ) {
        device_only("DevComm::multimem_reduce_sum")
    }

    /// `dst.lsa(p)[i] = src[i]` for every LSA peer through one multicast store (`ncclMultimemCopy`). 16-bit
    /// types need NCCL 2.32+ headers (NCCL stores pairs; weft's 2.28 fallback cannot).
    /// C++ `dev.multimem_copy(coop, src, dst, count)`.
    pub fn multimem_copy<T: MultimemElement, Co: Coop>(&self, coop: Co, src: &[T], dst: &Window<T>, count: usize) {
        device_only("DevComm::multimem_copy")
    }

    /// `dst.lsa(q)[i] = Σ_p src.lsa(p)[i]` for every peer `q`: multicast load-reduce, then multicast store
    /// (`ncclMultimemReduceSumCopy`). 16-bit types need NCCL 2.32+ headers.
    /// C++ `dev.multimem_reduce_sum_copy(coop, src, dst, count)`.
    pub fn multimem_reduce_sum_copy<T: MultimemElement, Co: Coop>(
        &self,
        coop: Co,
        src: &Window<T>,
        dst: &Window<T>,
        count: usize,
    ) {
        device_only("DevComm::multimem_reduce_sum_copy")
    }
}

impl<T: MultimemElement + Numeric> MultimemView<'_, T> {
    /// Elements in the view. C++ `mv.len()`.
    pub fn len(&self) -> usize {
        device_only("MultimemView::len")
    }

    /// Whether the view has no elements. C++ `mv.is_empty()`.
    pub fn is_empty(&self) -> bool {
        device_only("MultimemView::is_empty")
    }

    /// The sum over every LSA peer of element `index` (`multimem.ld_reduce.relaxed.sys.global.add`).
    /// C++ `mv.load_reduce_sum(index)`.
    pub fn load_reduce_sum(&self, index: usize) -> T {
        device_only("MultimemView::load_reduce_sum")
    }

    /// Adds `value` to element `index` of every LSA peer's copy (`multimem.red.relaxed.sys.global.add`; for 16-bit
    /// types a pair-wise add whose other half adds -0.0). C++ `mv.reduce_add(index, value)`.
    pub fn reduce_add(&self, index: usize, value: T) {
        device_only("MultimemView::reduce_add")
    }
}

impl<T: MultimemStore> MultimemView<'_, T> {
    /// Stores `value` into element `index` of every LSA peer's copy (`multimem.st.relaxed.sys.global`; 32- and
    /// 64-bit types only). C++ `mv.store(index, value)`.
    pub fn store(&self, index: usize, value: T) {
        device_only("MultimemView::store")
    }
}
