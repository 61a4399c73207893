//! The buffers and windows a generated launcher accepts for a kernel's `&[T]`, `&mut [T]` and `&Window<T>`
//! parameters.
//!
//! A launch hands the kernel a device address and a length, and the kernel's bounds (docs/macro.md, "Bounds") are
//! proved or checked against that length: so the address and length must be true. cudarc's `DevicePtr` traits are
//! safe to implement, so any type could report any address through them; the traits here are sealed instead, and
//! implemented only for memory whose address and length weft can trust:
//!
//! - cudarc's [`CudaSlice`], [`CudaView`] and [`CudaViewMut`] (allocated by cudarc, or cut from such an allocation
//!   by its bounds-checked `slice`; every way to make one from a raw address is `unsafe`);
//! - weft's [`DeviceBuffer`] (allocated by `ncclMemAlloc`) and the views of registered memory ([`Registered`],
//!   [`RegisteredMut`]: a window's or registration's elements, cut by bounds-checked `slice`) for slices, and weft's
//!   [`Window`] for windows.
//!
//! NCCL's calls (collectives, point-to-point, batches) take the same memory through [`NcclBuffer`] and
//! [`NcclBufferMut`], sealed on the same base: NCCL is handed an address and an element count, and trusts them as
//! much as a kernel does. A view's uses are tracked on the owner's `DeviceBuffer`, so they are ordered across streams
//! (and waited for by its release and free) like the buffer's own.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};

use crate::resources::uses::Access;

use super::WindowArg;
use crate::comm::Mode;
use crate::devcomm::Team;
use crate::error::Result;
use crate::resources::{CloseWatch, DeviceBuffer, Registered, RegisteredMut, Window};

pub(crate) mod sealed {
    use super::*;

    /// Device memory whose address and length weft trusts (see the module docs). Not implementable outside weft.
    pub trait Buffer<T> {
        /// The number of `T`s.
        fn buffer_len(&self) -> usize;
        /// The stream the memory belongs to (its context is the device it lives on).
        fn buffer_stream(&self) -> &Arc<CudaStream>;
        /// The address for work on `stream` (`held`: the same stream as an `Arc`, when the caller has one) that reads
        /// the memory; `stream` first waits for pending writes on other streams, and the read is recorded when the
        /// guard drops (drop it once the work is enqueued).
        fn read_address<'a>(
            &'a self,
            stream: &'a CudaStream,
            held: Option<&Arc<CudaStream>>,
        ) -> Result<(u64, SyncOnDrop<'a>)>;
    }

    /// [`Buffer`] that work may also write.
    pub trait BufferMut<T>: Buffer<T> {
        /// The address for work on `stream` that writes the memory; `stream` first waits for pending reads and writes
        /// on other streams, and the write is recorded when the guard drops.
        fn write_address<'a>(
            &'a mut self,
            stream: &'a CudaStream,
            held: Option<&Arc<CudaStream>>,
        ) -> Result<(u64, SyncOnDrop<'a>)>;
    }

    /// A symmetric window weft registered.
    pub trait SymmetricWindow<T> {
        /// The by-value argument, or why the window cannot be used (released, …).
        fn window_arg(&self) -> Result<WindowArg>;
        /// The CUDA device the window's local part lives on.
        fn cuda_device(&self) -> usize;
        /// Orders a kernel using the window on `stream` after the conflicting uses of its local buffer on other
        /// streams (the kernel may write it), and notes the launch (what freeing the window waits for).
        fn begin_launch(&self, stream: &Arc<CudaStream>) -> Result<()>;
        /// Claims the window's local buffer for the replays on `replay` of the graph alive while `graph` is.
        fn claim_for_graph(&self, graph: &Arc<()>, replay: &Arc<CudaStream>) -> Result<()>;
        /// The local buffer's address and length (what a kernel taking the window may write on this rank).
        fn local_range(&self) -> (u64, usize);
        /// The LSA team of the window's communicator (its size bounds `window.lsa(peer)`).
        fn lsa_team(&self) -> Result<Team>;
        /// The NCCL communicator the window is registered on: a launch's windows and device communicator share one.
        fn communicator_handle(&self) -> usize;
        /// What a CUDA graph recording a kernel over the window keeps, to refuse replays once the window's
        /// communicator released its resources.
        fn close_watch(&self) -> CloseWatch;
    }
}

/// A buffer a kernel reads through a `&[T]` parameter: cudarc's `CudaSlice<T>`, `CudaView<'_, T>`,
/// `CudaViewMut<'_, T>`, weft's `DeviceBuffer<T>`, or a view of a window's or registration's elements
/// (`Registered<'_, T>`, `RegisteredMut<'_, T>`).
///
/// Sealed: a launch trusts the address and length it reports (module docs).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not device memory a weft kernel can read as `&[{T}]`",
    label = "a `&[{T}]` kernel parameter takes a buffer of `{T}`s",
    note = "pass a cudarc `CudaSlice<{T}>`, `CudaView<'_, {T}>` or `CudaViewMut<'_, {T}>`, a weft \
            `DeviceBuffer<{T}>`, or a window's `view()` / `buffer_mut()` (the element types must match)"
)]
pub trait KernelSlice<T>: sealed::Buffer<T> {}

/// A buffer a kernel writes through a `&mut [T]` parameter: cudarc's `CudaSlice<T>`, `CudaViewMut<'_, T>`,
/// weft's `DeviceBuffer<T>`, or a writable view of a window's or registration's elements (`RegisteredMut<'_, T>`).
///
/// Sealed: a launch trusts the address and length it reports (module docs).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not device memory a weft kernel can write as `&mut [{T}]`",
    label = "a `&mut [{T}]` kernel parameter takes a writable buffer of `{T}`s",
    note = "pass a cudarc `CudaSlice<{T}>` or `CudaViewMut<'_, {T}>`, a weft `DeviceBuffer<{T}>`, or a window's \
            `buffer_mut()` (the element types must match)"
)]
pub trait KernelSliceMut<T>: sealed::BufferMut<T> {}

/// A symmetric window a kernel reaches through a `&Window<T>` parameter: a weft [`Window<'_, T, M>`](Window).
///
/// Sealed: a launch trusts the handle and length it reports (module docs).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a window a weft kernel can take as `&Window<{T}>`",
    label = "a `&Window<{T}>` kernel parameter takes a weft window of `{T}`s",
    note = "register one with `Communicator::window` (the element types must match)"
)]
pub trait KernelWindow<T>: sealed::SymmetricWindow<T> {}

/// A buffer NCCL reads (a collective's or a send's input): cudarc's `CudaSlice<T>`, `CudaView<'_, T>`,
/// `CudaViewMut<'_, T>`, weft's `DeviceBuffer<T>`, or a view of a window's or registration's elements
/// (`Registered<'_, T>`, `RegisteredMut<'_, T>`).
///
/// Sealed: NCCL is handed the address and length it reports (module docs), so a type of one's own cannot pass.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not device memory NCCL may read as `{T}`s",
    label = "NCCL reads a buffer of `{T}`s here",
    note = "pass a cudarc `CudaSlice<{T}>`, `CudaView<'_, {T}>` or `CudaViewMut<'_, {T}>`, a weft \
            `DeviceBuffer<{T}>`, or a window's `view()` / `buffer_mut()` (the element types must match): NCCL trusts \
            the address and length a buffer reports, so only memory weft can vouch for is accepted"
)]
pub trait NcclBuffer<T>: sealed::Buffer<T> {}

/// A buffer NCCL writes (a collective's or a receive's output): cudarc's `CudaSlice<T>`, `CudaViewMut<'_, T>`,
/// weft's `DeviceBuffer<T>`, or a writable view of a window's or registration's elements (`RegisteredMut<'_, T>`).
///
/// Sealed: NCCL is handed the address and length it reports (module docs), so a type of one's own cannot pass.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not device memory NCCL may write as `{T}`s",
    label = "NCCL writes a buffer of `{T}`s here",
    note = "pass a cudarc `CudaSlice<{T}>` or `CudaViewMut<'_, {T}>`, a weft `DeviceBuffer<{T}>`, or a window's \
            `buffer_mut()` (the element types must match): NCCL trusts the address and length a buffer reports, so \
            only memory weft can vouch for is accepted"
)]
pub trait NcclBufferMut<T>: sealed::BufferMut<T> + NcclBuffer<T> {}

/// cudarc's own types: their `DevicePtr` impls report the memory they own and order it with cudarc's events (a
/// stream given as an `Arc` changes nothing for them).
macro_rules! trusted_buffer {
    ($($ty:ty),* $(,)?) => {$(
        impl<T> sealed::Buffer<T> for $ty {
            fn buffer_len(&self) -> usize {
                DeviceSlice::len(self)
            }
            fn buffer_stream(&self) -> &Arc<CudaStream> {
                DeviceSlice::stream(self)
            }
            fn read_address<'a>(
                &'a self,
                stream: &'a CudaStream,
                _held: Option<&Arc<CudaStream>>,
            ) -> Result<(u64, SyncOnDrop<'a>)> {
                Ok(DevicePtr::device_ptr(self, stream))
            }
        }
        impl<T> KernelSlice<T> for $ty {}
        impl<T> NcclBuffer<T> for $ty {}
    )*};
}

macro_rules! trusted_buffer_mut {
    ($($ty:ty),* $(,)?) => {$(
        impl<T> sealed::BufferMut<T> for $ty {
            fn write_address<'a>(
                &'a mut self,
                stream: &'a CudaStream,
                _held: Option<&Arc<CudaStream>>,
            ) -> Result<(u64, SyncOnDrop<'a>)> {
                Ok(DevicePtrMut::device_ptr_mut(self, stream))
            }
        }
        impl<T> KernelSliceMut<T> for $ty {}
        impl<T> NcclBufferMut<T> for $ty {}
    )*};
}

trusted_buffer!(CudaSlice<T>, CudaView<'_, T>, CudaViewMut<'_, T>);
trusted_buffer_mut!(CudaSlice<T>, CudaViewMut<'_, T>);

/// weft's own buffer: `ncclMemAlloc` memory of its length, its uses tracked per stream (`resources::uses`).
impl<T> sealed::Buffer<T> for DeviceBuffer<T> {
    fn buffer_len(&self) -> usize {
        DeviceSlice::len(self)
    }
    fn buffer_stream(&self) -> &Arc<CudaStream> {
        DeviceSlice::stream(self)
    }
    fn read_address<'a>(
        &'a self,
        stream: &'a CudaStream,
        held: Option<&Arc<CudaStream>>,
    ) -> Result<(u64, SyncOnDrop<'a>)> {
        Ok((self.device_address(), self.begin_use(stream, held, Access::Read)?))
    }
}

impl<T> sealed::BufferMut<T> for DeviceBuffer<T> {
    fn write_address<'a>(
        &'a mut self,
        stream: &'a CudaStream,
        held: Option<&Arc<CudaStream>>,
    ) -> Result<(u64, SyncOnDrop<'a>)> {
        Ok((self.device_address(), self.begin_use(stream, held, Access::Write)?))
    }
}

impl<T> KernelSlice<T> for DeviceBuffer<T> {}
impl<T> NcclBuffer<T> for DeviceBuffer<T> {}
impl<T> KernelSliceMut<T> for DeviceBuffer<T> {}
impl<T> NcclBufferMut<T> for DeviceBuffer<T> {}

/// The views of registered memory: the view's part of the owner's `DeviceBuffer`, which a view never outgrows
/// (`slice` checks), its uses tracked on that buffer like the buffer's own (`resources::uses`).
macro_rules! trusted_view {
    ($($ty:ident),* $(,)?) => {$(
        impl<T: cudarc::driver::DeviceRepr> sealed::Buffer<T> for $ty<'_, T> {
            fn buffer_len(&self) -> usize {
                DeviceSlice::len(self)
            }
            fn buffer_stream(&self) -> &Arc<CudaStream> {
                DeviceSlice::stream(self)
            }
            fn read_address<'a>(
                &'a self,
                stream: &'a CudaStream,
                held: Option<&Arc<CudaStream>>,
            ) -> Result<(u64, SyncOnDrop<'a>)> {
                self.begin_use(stream, held, Access::Read)
            }
        }
        impl<T: cudarc::driver::DeviceRepr> KernelSlice<T> for $ty<'_, T> {}
        impl<T: cudarc::driver::DeviceRepr> NcclBuffer<T> for $ty<'_, T> {}
    )*};
}

trusted_view!(Registered, RegisteredMut);

/// Only the writable view, made from a mutable borrow of its owner, is written.
impl<T: cudarc::driver::DeviceRepr> sealed::BufferMut<T> for RegisteredMut<'_, T> {
    fn write_address<'a>(
        &'a mut self,
        stream: &'a CudaStream,
        held: Option<&Arc<CudaStream>>,
    ) -> Result<(u64, SyncOnDrop<'a>)> {
        self.begin_use(stream, held, Access::Write)
    }
}
impl<T: cudarc::driver::DeviceRepr> KernelSliceMut<T> for RegisteredMut<'_, T> {}
impl<T: cudarc::driver::DeviceRepr> NcclBufferMut<T> for RegisteredMut<'_, T> {}

impl<T: crate::Element, M: Mode> sealed::SymmetricWindow<T> for Window<'_, T, M> {
    fn window_arg(&self) -> Result<WindowArg> {
        self.kernel_arg()
    }
    fn cuda_device(&self) -> usize {
        self.communicator().cuda_device()
    }
    fn begin_launch(&self, stream: &Arc<CudaStream>) -> Result<()> {
        // A kernel may store into its window's local part (`x.local()[i] = v`): a write.
        drop(self.buffer().begin_use(stream, Some(stream), Access::Write)?);
        Ok(())
    }
    fn claim_for_graph(&self, graph: &Arc<()>, replay: &Arc<CudaStream>) -> Result<()> {
        self.buffer().claim_for_graph(graph, replay, Access::Write)
    }
    fn local_range(&self) -> (u64, usize) {
        (self.buffer().device_address(), self.buffer().num_bytes())
    }
    fn lsa_team(&self) -> Result<Team> {
        self.communicator().team_lsa()
    }
    fn communicator_handle(&self) -> usize {
        Window::communicator_handle(self)
    }
    fn close_watch(&self) -> CloseWatch {
        Window::close_watch(self)
    }
}

impl<T: crate::Element, M: Mode> KernelWindow<T> for Window<'_, T, M> {}
