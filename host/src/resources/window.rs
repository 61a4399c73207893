//! Buffer registrations (`ncclCommRegister`) and symmetric windows (`ncclCommWindowRegister`).

use cudarc::driver::{CudaStream, DevicePtr, DeviceRepr};

use crate::comm::{Active, Communicator, Mode};
use crate::datatype::Element;
use crate::error::Error;
use crate::resources::{DeviceBuffer, Native, ResourceId};
use crate::result;
use crate::sys;
use crate::version::{Version, V2_29};

/// A buffer registered for zero-copy collectives (`ncclCommRegister`); deregistered on drop.
pub struct Registration<'a, M: Mode = crate::Blocking> {
    comm: &'a Communicator<Active, M>,
    id: ResourceId,
}

impl<M: Mode> Communicator<Active, M> {
    /// Registers `buffer` with NCCL for zero-copy collectives. The registration borrows the buffer, so the
    /// buffer outlives it.
    pub fn register<'a, T>(&'a self, buffer: &'a impl DevicePtr<T>) -> Result<Registration<'a, M>, Error> {
        let stream = buffer.stream().clone();
        if stream.context().ordinal() != self.cuda_device() {
            return Err(Error::invalid("buffer", "lives on another device than this rank"));
        }
        let (ptr, _guard) = buffer.device_ptr(&stream);
        // SAFETY: our live, active communicator; the buffer is device memory of this rank and is borrowed
        // for the registration's whole life.
        let handle = unsafe { result::comm_register(self.library(), self.raw(), ptr as _, buffer.num_bytes()) }?;
        Ok(Registration { comm: self, id: self.register_resource(Native::Registration(handle)) })
    }

    /// Registers `buffer` as this rank's part of a symmetric window (`ncclCommWindowRegister`): collective,
    /// every rank calls it with a buffer of the same length. The window owns the buffer
    /// ([`Window::into_buffer`] gives it back).
    ///
    /// Fails with [`Error::MissingCapability`] when the communicator has no symmetric-memory support (NCCL
    /// then registers nothing and returns a null window, which weft never hands out).
    pub fn window<T: Element>(&self, buffer: DeviceBuffer<T>, flags: WindowFlags) -> Result<Window<'_, T, M>, Error> {
        use cudarc::driver::DeviceSlice;
        if buffer.stream().context().ordinal() != self.cuda_device() {
            return Err(Error::invalid("buffer", "lives on another device than this rank"));
        }
        flags.check(self.library().version())?;
        // SAFETY: our live, active communicator; the buffer is ncclMemAlloc memory of this rank, owned by the
        // window for its whole life.
        let raw = unsafe {
            result::comm_window_register(
                self.library(),
                self.raw(),
                buffer.device_address() as _,
                buffer.num_bytes(),
                flags.0,
            )
        }?;
        let id = self.register_resource(Native::Window(raw));
        Ok(Window { comm: self, id, raw, buffer: Some(buffer) })
    }

    /// Allocates `len` elements with `ncclMemAlloc` on `stream`'s device and registers them as a window.
    pub fn alloc_window<T: Element>(
        &self,
        stream: &std::sync::Arc<CudaStream>,
        len: usize,
        flags: WindowFlags,
    ) -> Result<Window<'_, T, M>, Error> {
        self.window(DeviceBuffer::new(stream, len)?, flags)
    }
}

impl<M: Mode> Drop for Registration<'_, M> {
    fn drop(&mut self) {
        if let Err(error) = self.comm.release_resource(self.id) {
            tracing::error!(%error, "ncclCommDeregister failed");
        }
    }
}

impl<M: Mode> std::fmt::Debug for Registration<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration").finish_non_exhaustive()
    }
}

/// Flags for [`Communicator::window`] (`NCCL_WIN_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowFlags(i32);

impl WindowFlags {
    /// No special behaviour.
    pub const DEFAULT: WindowFlags = WindowFlags(sys::NCCL_WIN_DEFAULT as i32);
    /// The buffer is symmetric across ranks: NCCL's own collectives may use symmetric kernels on it.
    pub const COLL_SYMMETRIC: WindowFlags = WindowFlags(sys::NCCL_WIN_COLL_SYMMETRIC as i32);
    /// Strict ordering of window operations (NCCL 2.29+).
    pub const STRICT_ORDERING: WindowFlags = WindowFlags(sys::NCCL_WIN_STRICT_ORDERING as i32);
    /// Register for GIN only (NCCL 2.31+).
    pub const GIN_ONLY: WindowFlags = WindowFlags(sys::NCCL_WIN_GIN_ONLY as i32);

    /// Both sets of flags.
    pub const fn union(self, other: WindowFlags) -> WindowFlags {
        WindowFlags(self.0 | other.0)
    }

    fn check(self, found: Version) -> Result<(), Error> {
        let needs = |flag: WindowFlags, needs: Version, call: &'static str| {
            if self.0 & flag.0 != 0 && !found.at_least(needs) {
                Err(Error::Unsupported { call, needs, found })
            } else {
                Ok(())
            }
        };
        needs(WindowFlags::STRICT_ORDERING, V2_29, "NCCL_WIN_STRICT_ORDERING")?;
        needs(WindowFlags::GIN_ONLY, Version::new(2, 31, 0), "NCCL_WIN_GIN_ONLY")
    }
}

/// This rank's part of a symmetric window over `T`s: the memory peers reach by load/store (LSA) or GIN
/// from kernels, through a [`DevComm`](crate::DevComm). Deregistered on drop (not collective); the buffer
/// is freed with it unless taken back with [`into_buffer`](Window::into_buffer).
pub struct Window<'comm, T: DeviceRepr, M: Mode = crate::Blocking> {
    comm: &'comm Communicator<Active, M>,
    id: ResourceId,
    raw: sys::ncclWindow_t,
    buffer: Option<DeviceBuffer<T>>,
}

impl<'comm, T: Element, M: Mode> Window<'comm, T, M> {
    /// The raw `ncclWindow_t`, for kernel arguments; fails if `close_all_resources` released the window.
    pub fn raw(&self) -> Result<sys::ncclWindow_t, Error> {
        self.comm.check_live(self.id, "window")?;
        Ok(self.raw)
    }

    /// The kernel argument for a `&Window<T>` parameter of a `#[weft::kernel]` (see docs/kernel-abi.md).
    pub fn kernel_arg(&self) -> Result<crate::launch::WindowArg, Error> {
        Ok(crate::launch::WindowArg { win: self.raw()?.cast(), offset_bytes: 0, len: self.len() })
    }

    /// The number of elements in this rank's part.
    pub fn len(&self) -> usize {
        self.buffer().len()
    }

    /// Whether the window is empty (never: buffers hold at least one element).
    pub fn is_empty(&self) -> bool {
        self.buffer().is_empty()
    }

    /// The local buffer (to fill it, read it, or pass it to collectives).
    pub fn buffer(&self) -> &DeviceBuffer<T> {
        self.buffer.as_ref().expect("the buffer is only taken by into_buffer, which consumes the window")
    }

    /// The local buffer, mutably.
    pub fn buffer_mut(&mut self) -> &mut DeviceBuffer<T> {
        self.buffer.as_mut().expect("the buffer is only taken by into_buffer, which consumes the window")
    }

    /// The communicator the window belongs to.
    pub fn communicator(&self) -> &'comm Communicator<Active, M> {
        self.comm
    }

    /// Deregisters the window and returns its buffer.
    pub fn into_buffer(mut self) -> Result<DeviceBuffer<T>, Error> {
        // Kernels and collectives this rank enqueued may still use the window: finish them before deregistering.
        self.buffer().wait_for_uses()?;
        self.comm.release_resource(self.id)?;
        Ok(self.buffer.take().expect("a live window always holds its buffer"))
    }

    /// The local buffer NCCL has on record for this window (`ncclWinGetUserPtr`, NCCL 2.29+): this rank's
    /// buffer's device address, as registered.
    pub fn user_address(&self) -> Result<u64, Error> {
        let raw = self.raw()?;
        // SAFETY: a live window of this library and communicator.
        let ptr = unsafe { result::win_get_user_ptr(self.comm.library(), self.comm.raw(), raw) }?;
        Ok(ptr as u64)
    }

    /// The device address of element `index` in LSA peer `lsa_rank`'s part, as seen from this GPU
    /// (`ncclGetLsaDevicePointer`, NCCL 2.29+).
    pub fn lsa_address(&self, lsa_rank: usize, index: usize) -> Result<u64, Error> {
        let raw = self.raw()?;
        if index >= self.len() {
            return Err(Error::invalid("index", format!("{index} is past the window's {} elements", self.len())));
        }
        let lsa_rank = i32::try_from(lsa_rank).map_err(|_| Error::invalid("lsa_rank", "too large"))?;
        // SAFETY: a live window of this library; the offset is inside it.
        let ptr = unsafe {
            result::get_lsa_device_pointer(self.comm.library(), raw, index * std::mem::size_of::<T>(), lsa_rank)
        }?;
        Ok(ptr as u64)
    }

    /// Host-initiated one-sided write (`ncclPutSignal`, NCCL 2.29+): copies `local` into `peer`'s part of
    /// this window at element `offset`, then raises signal `signal_index` there.
    pub fn put_signal(
        &self,
        local: &impl DevicePtr<T>,
        peer: usize,
        offset: usize,
        signal_index: u32,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw = self.raw()?;
        let end = offset.checked_add(local.len()).filter(|end| *end <= self.len());
        if end.is_none() {
            return Err(Error::invalid(
                "offset",
                format!("{} elements at {offset} overrun the window's {} elements", local.len(), self.len()),
            ));
        }
        if peer >= self.comm.nranks() {
            return Err(Error::invalid("peer", format!("rank {peer} is not below nranks {}", self.comm.nranks())));
        }
        if stream.context().ordinal() != self.comm.cuda_device() {
            return Err(Error::invalid("stream", "belongs to another device than this rank"));
        }
        let signal = i32::try_from(signal_index).map_err(|_| Error::invalid("signal_index", "exceeds i32::MAX"))?;
        let (ptr, _guard) = local.device_ptr(stream);
        // SAFETY: our live communicator and window, a stream of its device, a local buffer of `len` Ts and a
        // destination range inside the peer's (same-sized) part of the window.
        let progress = unsafe {
            result::put_signal(
                self.comm.library(),
                ptr as _,
                local.len(),
                T::DATATYPE,
                peer as i32,
                raw,
                offset * std::mem::size_of::<T>(),
                signal,
                0,
                0,
                self.comm.raw(),
                stream.cu_stream().cast(),
            )
        }?;
        debug_assert!(progress == result::Progress::Done || !M::BLOCKING);
        Ok(())
    }
}

impl<T: DeviceRepr, M: Mode> Drop for Window<'_, T, M> {
    fn drop(&mut self) {
        if self.buffer.is_none() {
            return;
        }
        // Kernels and collectives this rank enqueued may still use the window: finish them before deregistering.
        // Never the whole device: on a shared GPU a peer's kernel may be waiting for this rank (docs/multi-rank.md).
        if let Some(Err(error)) = self.buffer.as_ref().map(DeviceBuffer::wait_for_uses) {
            tracing::error!(%error, "waiting for the window's last use before ncclCommWindowDeregister failed");
        }
        if let Err(error) = self.comm.release_resource(self.id) {
            tracing::error!(%error, "ncclCommWindowDeregister failed");
        }
    }
}

impl<T: DeviceRepr, M: Mode> std::fmt::Debug for Window<'_, T, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window").field("raw", &self.raw).field("buffer", &self.buffer).finish()
    }
}
