//! Block-shared arrays of compile-time size.

use core::marker::PhantomData;
use core::ops::{Index, IndexMut};

use crate::device_only;
use crate::numeric::Element;

/// `N` elements of `T` in shared memory, one array per block, uninitialised until written.
///
/// Declare it with a `let` whose initialiser is `SharedArray::<T, N>::new()` (or annotate the type:
/// `let tile: SharedArray<f32, 256> = SharedArray::new();`). The macro turns that statement into the C++
/// declaration `__shared__ weft::SharedArray<float, 256> tile;` (rule R12), so the `let` must be a statement of
/// its own and `N` a constant expression (a literal, a `const` item or a const generic parameter). Every thread of
/// the block that runs the statement sees the same array; synchronise with
/// [`sync_threads`](crate::sync_threads) between writing and reading other threads' elements.
///
/// ```
/// # use weft_device::prelude::*;
/// fn block_sum(x: &[f32], out: &mut [f32]) {
///     let mut partial = SharedArray::<f32, 32>::new();
///     let v = warp_reduce_sum(x[index_1d()]);
///     if lane_id() == 0 {
///         partial[warp_id() as usize] = v;
///     }
///     sync_threads();
/// }
/// ```
#[derive(Debug)]
pub struct SharedArray<T: Element, const N: usize> {
    _device_only: PhantomData<[T; N]>,
}

impl<T: Element, const N: usize> SharedArray<T, N> {
    /// Declares the array (rule R12). Its contents are uninitialised.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        device_only("SharedArray::new")
    }

    /// `N`. C++ `.len()`.
    pub fn len(&self) -> usize {
        device_only("SharedArray::len")
    }

    /// Whether `N` is 0. C++ `.is_empty()`.
    pub fn is_empty(&self) -> bool {
        device_only("SharedArray::is_empty")
    }

    /// The array as a slice, to pass where `&[T]` is expected. C++ `.as_slice()` (a `weft::Slice<T>`).
    pub fn as_slice(&self) -> &[T] {
        device_only("SharedArray::as_slice")
    }

    /// The array as a mutable slice. C++ `.as_mut_slice()` (a `weft::SliceMut<T>`).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        device_only("SharedArray::as_mut_slice")
    }
}

impl<T: Element, const N: usize> Index<usize> for SharedArray<T, N> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        device_only("SharedArray[]")
    }
}

impl<T: Element, const N: usize> IndexMut<usize> for SharedArray<T, N> {
    fn index_mut(&mut self, index: usize) -> &mut T {
        device_only("SharedArray[]")
    }
}
