//! Views of memory registered with NCCL (a window's part, a registration's buffer): its elements, never the owning
//! [`DeviceBuffer`].
//!
//! A `&mut DeviceBuffer` would let safe code assign another buffer over it or `std::mem::swap` it with one: the
//! registered memory would be freed while NCCL and peers still map it, and launches would see the other buffer's
//! length. A view holds only a borrow of the buffer (shared with nothing while it is mutable), a start and a length
//! inside it; swapping two views swaps the views.

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use cudarc::driver::{sys::CUdeviceptr, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice, SyncOnDrop};

use super::uses::Access;
use super::DeviceBuffer;
use crate::error::Error;

/// `start..end` of `range` inside `len` elements, or an error naming `argument`.
fn bounds(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize), Error> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(start), Some(end)) if start < end && end <= len => Ok((start, end - start)),
        _ => Err(Error::invalid(
            "range",
            format!("is not a non-empty range inside the view's {len} elements: pass `a..b` with a < b <= {len}"),
        )),
    }
}

/// Elements `offset..offset + len` of registered memory, read-only: usable as a kernel's `&[T]` argument, as the
/// source of a collective (cudarc's `DevicePtr`), or copied to the host. Made by `view()` on a
/// [`Window`](crate::Window) or [`Registration`](crate::Registration).
pub struct Registered<'a, T> {
    buffer: &'a DeviceBuffer<T>,
    offset: usize,
    len: usize,
}

/// Elements `offset..offset + len` of registered memory, writable: usable as a kernel's `&mut [T]` argument, as
/// the destination of a collective (cudarc's `DevicePtrMut`), filled from or copied to the host. Made by
/// `buffer_mut()` on a [`Window`](crate::Window) or [`Registration`](crate::Registration), which it borrows mutably.
///
/// It gives access to the elements only: the memory cannot be replaced or freed through it (see the module docs).
pub struct RegisteredMut<'a, T> {
    buffer: &'a DeviceBuffer<T>,
    offset: usize,
    len: usize,
    /// Made from a mutable borrow of the owner: no other view of the memory exists meanwhile.
    exclusive: PhantomData<&'a mut DeviceBuffer<T>>,
}

impl<'a, T> Registered<'a, T> {
    pub(crate) fn whole(buffer: &'a DeviceBuffer<T>) -> Registered<'a, T> {
        Registered { buffer, offset: 0, len: DeviceSlice::len(buffer) }
    }
}

impl<'a, T> RegisteredMut<'a, T> {
    /// The whole of `buffer`, which the caller borrows mutably for `'a`.
    pub(crate) fn whole(buffer: &'a DeviceBuffer<T>) -> RegisteredMut<'a, T> {
        RegisteredMut { buffer, offset: 0, len: DeviceSlice::len(buffer), exclusive: PhantomData }
    }
}

/// What both views share: the element range and the copies.
macro_rules! view_common {
    ($view:ident) => {
        impl<'a, T: DeviceRepr> $view<'a, T> {
            /// The number of elements in the view.
            pub fn len(&self) -> usize {
                self.len
            }

            /// Whether the view is empty (never: views hold at least one element).
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }

            /// The device address of the view's first element.
            pub fn device_address(&self) -> CUdeviceptr {
                self.buffer.device_address() + (self.offset * std::mem::size_of::<T>()) as CUdeviceptr
            }

            /// Elements `range` of the view, read-only (an error if `range` is empty or reaches past the view).
            pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<Registered<'_, T>, Error> {
                let (start, len) = bounds(range, self.len)?;
                Ok(Registered { buffer: self.buffer, offset: self.offset + start, len })
            }

            /// Copies the view's elements to a new host vector (blocking, after the writes of the owner's buffer on
            /// every stream, as `DeviceBuffer::copy_to_host`).
            pub fn copy_to_host(&self) -> Result<Vec<T>, Error>
            where
                T: Default + Clone,
            {
                self.buffer.read_elements_to_host(self.offset, self.len, concat!(stringify!($view), "::copy_to_host"))
            }

            /// The view's address for work on `stream` (`held`: the same stream as an `Arc`, when the caller has
            /// one) with `access`, its use begun on the owner's buffer: ordered after the conflicting uses on other
            /// streams, refused where a live CUDA graph's claim conflicts, and recorded when the guard drops
            /// (`DeviceBuffer::begin_use`). Only a `RegisteredMut` is ever used with `Access::Write`.
            pub(crate) fn begin_use<'b>(
                &'b self,
                stream: &'b CudaStream,
                held: Option<&Arc<CudaStream>>,
                access: Access,
            ) -> Result<(u64, SyncOnDrop<'b>), Error> {
                Ok((self.device_address(), self.buffer.begin_use(stream, held, access)?))
            }
        }

        impl<T> DeviceSlice<T> for $view<'_, T> {
            fn len(&self) -> usize {
                self.len
            }
            fn stream(&self) -> &Arc<CudaStream> {
                DeviceSlice::stream(self.buffer)
            }
        }

        /// cudarc's copies and libraries read the view like the owner's buffer: ordered after its writes on other
        /// streams, the use recorded on it (what the owner's release and the buffer's free wait for).
        impl<T: DeviceRepr> DevicePtr<T> for $view<'_, T> {
            fn device_ptr<'b>(&'b self, stream: &'b CudaStream) -> (CUdeviceptr, SyncOnDrop<'b>) {
                (self.device_address(), self.buffer.untracked_use_guard(stream, Access::Read))
            }
        }

        impl<T> std::fmt::Debug for $view<'_, T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($view)).field("offset", &self.offset).field("len", &self.len).finish()
            }
        }
    };
}

view_common!(Registered);
view_common!(RegisteredMut);

impl<'a, T: DeviceRepr> RegisteredMut<'a, T> {
    /// Elements `range` of the view, writable (an error if `range` is empty or reaches past the view).
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<RegisteredMut<'_, T>, Error> {
        let (start, len) = bounds(range, self.len)?;
        Ok(RegisteredMut { buffer: self.buffer, offset: self.offset + start, len, exclusive: PhantomData })
    }

    /// Copies `host` into the view (blocking, after every use of the owner's buffer on every stream, as
    /// `DeviceBuffer::copy_from_host`). Lengths must match.
    pub fn copy_from_host(&mut self, host: &[T]) -> Result<(), Error> {
        if host.len() != self.len {
            return Err(Error::invalid("host", format!("holds {} elements, the view {}", host.len(), self.len)));
        }
        self.buffer.write_elements_from_host(self.offset, host, "RegisteredMut::copy_from_host")
    }
}

/// cudarc's copies and libraries write the view like the owner's buffer: ordered after its uses on other streams.
impl<T: DeviceRepr> DevicePtrMut<T> for RegisteredMut<'_, T> {
    fn device_ptr_mut<'b>(&'b mut self, stream: &'b CudaStream) -> (CUdeviceptr, SyncOnDrop<'b>) {
        (self.device_address(), self.buffer.untracked_use_guard(stream, Access::Write))
    }
}

#[cfg(test)]
mod tests {
    use super::bounds;

    #[test]
    fn sub_slices_stay_inside_the_view() {
        assert_eq!(bounds(.., 8).unwrap(), (0, 8));
        assert_eq!(bounds(2..5, 8).unwrap(), (2, 3));
        assert_eq!(bounds(2..=7, 8).unwrap(), (2, 6));
        assert_eq!(bounds(7.., 8).unwrap(), (7, 1));
        for refused in [bounds(0..9, 8), bounds(8.., 8), bounds(3..3, 8), bounds(0..=usize::MAX, 8)] {
            let error = refused.unwrap_err().to_string();
            assert!(error.contains("inside the view's 8 elements"), "{error}");
        }
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = bounds(5..2, 8);
        assert!(backwards.is_err());
    }
}
