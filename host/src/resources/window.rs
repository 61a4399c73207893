//! Symmetric windows (`ncclCommWindowRegister`).

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr};

use super::symmetry::SizeExchange;
use super::{InUse, Liveness, Registered, RegisteredMut};
use crate::comm::{Active, Communicator, Mode, Pending, Resolve};
use crate::datatype::Element;
use crate::error::Error;
use crate::group::{Completion, Group};
use crate::resources::{DeviceBuffer, Native, ResourceId};
use crate::result;
use crate::sys;
use crate::version::{Version, V2_29};

impl<M: Mode> Communicator<Active, M> {
    /// Registers `buffer` as this rank's part of a symmetric window (`ncclCommWindowRegister`): collective,
    /// every rank calls it with a buffer of the same size. The window owns the buffer
    /// ([`Window::into_buffer`] gives it back) and lends only its elements ([`Window::buffer_mut`]).
    ///
    /// Kernels bound their accesses to a peer's part by this rank's length, so the sizes must be equal: the ranks
    /// gather them (an `ncclAllGather` over the communicator, on the buffer's stream, with the registration) and
    /// each refuses unequal ones with [`Error::AsymmetricWindow`], deregistering its part.
    ///
    /// On a blocking communicator this returns the window; on a non-blocking one a [`Pending`]
    /// window, reachable once NCCL has written its handle. Inside an NCCL group a blocking communicator cannot
    /// return a window (NCCL writes the handle when the group ends): that is an error naming
    /// [`window_in`](Communicator::window_in), which returns it pending.
    ///
    /// Fails with [`Error::MissingCapability`] when the communicator has no symmetric-memory support (NCCL
    /// then registers nothing and returns a null window, which weft never hands out).
    pub fn window<T: Element>(
        &self,
        buffer: DeviceBuffer<T>,
        flags: WindowFlags,
    ) -> Result<M::Wrap<Window<'_, T, M>>, Error> {
        if M::BLOCKING && crate::group::in_group() {
            return Err(Error::invalid(
                "self",
                "inside an NCCL group, ncclCommWindowRegister writes the window only when the group ends: call \
                 `window_in(&group, ..)`, which returns a Pending window to wait for after Group::end",
            ));
        }
        let window = self.register_window(buffer, flags)?;
        let window = if M::BLOCKING { window.finish()? } else { window };
        Ok(M::wrap(window, result::Progress::Done))
    }

    /// [`window`](Communicator::window) inside an open NCCL group: the window is [`Pending`] until
    /// the outermost group ends (and, on a non-blocking communicator, until NCCL reports completion). Collective:
    /// every rank's registration must be in a group that ends, in one thread or in each rank's own. The sizes are
    /// gathered in the same group.
    pub fn window_in<T: Element>(
        &self,
        group: &Group,
        buffer: DeviceBuffer<T>,
        flags: WindowFlags,
    ) -> Result<Pending<Window<'_, T, M>>, Error> {
        let _open: &Group = group;
        Ok(Pending::new(self.register_window(buffer, flags)?))
    }

    /// Queues or makes the registration; the handle is read by `Window::finish` once NCCL has written it. Where NCCL
    /// completes the registration later (inside a group, or on a non-blocking communicator) the all-gather of the
    /// sizes is queued with it, in one group, and read by `finish`; otherwise `finish` runs it.
    fn register_window<T: Element>(
        &self,
        buffer: DeviceBuffer<T>,
        flags: WindowFlags,
    ) -> Result<Window<'_, T, M>, Error> {
        use cudarc::driver::DeviceSlice;
        if buffer.stream().context().ordinal() != self.cuda_device() {
            return Err(Error::invalid("buffer", "lives on another device than this rank"));
        }
        flags.check(self.library().version())?;
        if self.nranks() > 1 {
            // The sizes' all-gather is enqueued on the buffer's stream: not into a graph weft did not start.
            crate::graph::refuse_foreign_capture("Communicator::window", buffer.stream())?;
        }
        let gather_with_registration = self.nranks() > 1 && (!M::BLOCKING || crate::group::in_group());
        // A non-blocking communicator takes no call while one is in progress: the registration and the all-gather go
        // in one group of weft's (nested in the caller's, if open).
        let own_group =
            if gather_with_registration && !crate::group::in_group() { Some(Group::start()?) } else { None };
        let mut slot: Box<sys::ncclWindow_t> = Box::new(std::ptr::null_mut());
        let out: *mut sys::ncclWindow_t = &mut *slot;
        // SAFETY: our live, active communicator; the buffer is ncclMemAlloc memory of this rank, owned by the
        // window for its whole life; `out` is the heap slot the window owns, which is freed only once NCCL has
        // written it (finish) or is leaked (an unresolved drop).
        let progress = unsafe {
            result::comm_window_register(
                self.library(),
                self.raw(),
                buffer.device_address() as _,
                buffer.num_bytes(),
                flags.0,
                out,
            )
        }?;
        debug_assert!(progress == result::Progress::Done || !M::BLOCKING || crate::group::in_group());
        // Made before anything else can fail: its drop knows what NCCL may still write (the slot, the buffer, the
        // sizes) and leaks it rather than free it under NCCL.
        let mut window = Window {
            comm: self,
            id: None,
            slot,
            completion: Completion::new(self.library(), self.raw(), M::BLOCKING),
            flags,
            buffer: Some(Arc::new(buffer)),
            sizes: None,
        };
        if gather_with_registration {
            let stream = window.buffer().stream().clone();
            window.sizes = Some(SizeExchange::enqueue(self, window.buffer().num_bytes(), &stream)?);
        }
        if let Some(group) = own_group {
            group.end()?;
        }
        Ok(window)
    }

    /// Allocates `len` elements with `ncclMemAlloc` on `stream`'s device and registers them as a window
    /// ([`window`](Communicator::window)).
    pub fn alloc_window<T: Element>(
        &self,
        stream: &std::sync::Arc<CudaStream>,
        len: usize,
        flags: WindowFlags,
    ) -> Result<M::Wrap<Window<'_, T, M>>, Error> {
        self.window(DeviceBuffer::new(stream, len)?, flags)
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

    /// Whether every flag of `other` is set here.
    pub const fn contains(self, other: WindowFlags) -> bool {
        self.0 & other.0 == other.0
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
/// from kernels, through a [`DevComm`](crate::DevComm). Deregistered on drop (not collective), once the work this rank
/// enqueued on it has finished; the buffer is freed with it unless taken back with
/// [`into_buffer`](Window::into_buffer).
///
/// The window owns its buffer and never lends it mutably: [`buffer_mut`](Window::buffer_mut) gives a view of the
/// elements, so registered memory cannot be replaced or freed while NCCL and the peers map it, and its length is
/// fixed for the window's life.
pub struct Window<'comm, T: DeviceRepr, M: Mode = crate::Blocking> {
    comm: &'comm Communicator<Active, M>,
    /// Set once NCCL has written the handle and it is registered; a window without it is only ever inside a
    /// [`Pending`].
    id: Option<(ResourceId, Liveness)>,
    /// Where NCCL writes the handle, at the call or when the group / non-blocking operation completes: on the heap,
    /// owned by the window, read only once `completion` says it is written.
    slot: Box<sys::ncclWindow_t>,
    completion: Completion,
    flags: WindowFlags,
    /// Shared only with the registry entry, whose release (`close_all_resources`) waits for the buffer's uses.
    buffer: Option<Arc<DeviceBuffer<T>>>,
    /// Every rank's size, being gathered with a registration NCCL completes later; checked by `finish`.
    sizes: Option<SizeExchange>,
}

impl<T: Element, M: Mode> Resolve for Window<'_, T, M> {
    fn handles(&self) -> Vec<(&'static sys::Library, sys::ncclComm_t)> {
        if M::BLOCKING {
            Vec::new()
        } else {
            vec![(self.comm.library(), self.comm.raw())]
        }
    }

    fn awaits_group(&self) -> Result<bool, Error> {
        self.completion.awaits_group()
    }

    /// Reads the handle NCCL wrote (a null one is [`Error::MissingCapability`]), registers it, and checks that every
    /// rank registered the same size ([`Error::AsymmetricWindow`]: the window is deregistered on the way out).
    fn finish(mut self) -> Result<Self, Error> {
        if self.id.is_some() {
            return Ok(self);
        }
        let raw = *self.slot;
        if raw.is_null() {
            // Settled: NCCL registered nothing, so dropping frees the buffer and the slot.
            self.completion.settle();
            return Err(Error::MissingCapability {
                capability: "symmetric windows",
                reason: "ncclCommWindowRegister returned no window: the communicator has no symmetric-memory \
                         support (needs CUDA VMM and P2P between its GPUs, and memory from ncclMemAlloc)"
                    .into(),
            });
        }
        let uses: Arc<dyn InUse> = self.buffer.clone().expect("a window holds its buffer until into_buffer");
        self.id = Some(self.comm.register_tracked(Native::Window(raw), Some(uses)));
        // Ranks sharing this GPU in this process go on together (placement::LocalGroup); never inside a group.
        self.comm.line_up("window registration")?;
        let exchange = match self.sizes.take() {
            Some(exchange) => exchange,
            None if self.comm.nranks() > 1 => {
                let stream = cudarc::driver::DeviceSlice::stream(self.buffer()).clone();
                SizeExchange::enqueue(self.comm, self.buffer().num_bytes(), &stream)?
            }
            None => return Ok(self),
        };
        exchange.agree(self.comm.rank())?;
        Ok(self)
    }
}

impl<'comm, T: Element, M: Mode> Window<'comm, T, M> {
    /// The raw `ncclWindow_t`, for kernel arguments; fails if `close_all_resources` released the window.
    pub fn raw(&self) -> Result<sys::ncclWindow_t, Error> {
        self.liveness()?.check("window")?;
        Ok(*self.slot)
    }

    /// The registered window's liveness flag (an error if NCCL has not written it yet).
    fn liveness(&self) -> Result<&Liveness, Error> {
        match &self.id {
            Some((_, liveness)) => Ok(liveness),
            None => Err(Error::invalid("window", "NCCL has not written this window yet")),
        }
    }

    /// The kernel argument for a `&Window<T>` parameter of a `#[weft::kernel]` (see docs/kernel-abi.md).
    pub fn kernel_arg(&self) -> Result<crate::launch::WindowArg, Error> {
        Ok(crate::launch::WindowArg { win: self.raw()?.cast(), offset_bytes: 0, len: self.len() })
    }

    /// The number of elements in this rank's part (every rank's part holds as many bytes).
    pub fn len(&self) -> usize {
        self.buffer().len()
    }

    /// Whether the window is empty (never: buffers hold at least one element).
    pub fn is_empty(&self) -> bool {
        self.buffer().is_empty()
    }

    /// The local buffer, read-only (to read it, pass it to collectives as a source, or record it into a CUDA graph).
    pub fn buffer(&self) -> &DeviceBuffer<T> {
        self.buffer.as_deref().expect("the buffer is only taken by into_buffer, which consumes the window")
    }

    /// The local part's elements, writable: fill them from the host, or pass the view as a collective's destination
    /// or a kernel's `&mut [T]`. The view lends the elements only, never the buffer, so the registered memory cannot
    /// be replaced while the window lives.
    pub fn buffer_mut(&mut self) -> RegisteredMut<'_, T> {
        RegisteredMut::whole(self.buffer())
    }

    /// The local part's elements, read-only, as a view that can be narrowed ([`Registered::slice`]).
    pub fn view(&self) -> Registered<'_, T> {
        Registered::whole(self.buffer())
    }

    /// The communicator the window belongs to.
    pub fn communicator(&self) -> &'comm Communicator<Active, M> {
        self.comm
    }

    /// Deregisters the window, once the work this rank enqueued on it has finished, and returns its buffer.
    pub fn into_buffer(mut self) -> Result<DeviceBuffer<T>, Error> {
        // Kernels and collectives this rank enqueued may still use the window: finish them before deregistering.
        self.buffer().wait_for_uses()?;
        if let Some((id, _)) = &self.id {
            self.comm.release_resource(*id)?;
        }
        self.id = None;
        let buffer = self.buffer.take().expect("a live window always holds its buffer");
        // The registry entry, the only other holder, went with the release.
        Arc::try_unwrap(buffer).map_err(|_| Error::invalid("window", "its buffer is still shared; drop the window"))
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

    /// The flags the window was registered with.
    pub fn flags(&self) -> WindowFlags {
        self.flags
    }

    /// Host-initiated one-sided write (`ncclPutSignal`, NCCL 2.29+): copies `count` elements of this rank's part of
    /// `source`, from element `source_offset`, into `peer`'s part of this window at element `offset`, then raises
    /// signal `signal_index` there (the peer waits for it with
    /// [`Communicator::wait_signal`](crate::Communicator::wait_signal)).
    ///
    /// The source is a window, not any device buffer: NCCL (seen with 2.30.7) only puts from memory inside a
    /// window registered with [`WindowFlags::COLL_SYMMETRIC`] on the same communicator, and refuses anything else
    /// with `ncclInvalidArgument`. `source` may be this window itself.
    #[allow(clippy::too_many_arguments)]
    pub fn put_signal(
        &self,
        source: &Window<'comm, T, M>,
        source_offset: usize,
        count: usize,
        peer: usize,
        offset: usize,
        signal_index: u32,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        // NCCL would enqueue it only at a group's end, or into a graph nothing borrows the windows for.
        crate::collectives::refuse_in_group("Window::put_signal")?;
        crate::graph::refuse_foreign_capture("Window::put_signal", stream)?;
        let raw = self.raw()?;
        source.raw()?;
        if !std::ptr::eq(source.comm, self.comm) {
            return Err(Error::invalid("source", "belongs to another communicator than the destination window"));
        }
        if !source.flags.contains(WindowFlags::COLL_SYMMETRIC) {
            return Err(Error::invalid(
                "source",
                "NCCL puts only from a window registered with WindowFlags::COLL_SYMMETRIC: register the source so",
            ));
        }
        let within = |start: usize, len: usize| start.checked_add(count).is_some_and(|end| end <= len);
        if !within(source_offset, source.len()) {
            return Err(Error::invalid(
                "source_offset",
                format!("{count} elements at {source_offset} overrun the source window's {} elements", source.len()),
            ));
        }
        if !within(offset, self.len()) {
            return Err(Error::invalid(
                "offset",
                format!("{count} elements at {offset} overrun the window's {} elements", self.len()),
            ));
        }
        if peer >= self.comm.nranks() {
            return Err(Error::invalid("peer", format!("rank {peer} is not below nranks {}", self.comm.nranks())));
        }
        if stream.context().ordinal() != self.comm.cuda_device() {
            return Err(Error::invalid("stream", "belongs to another device than this rank"));
        }
        let signal = i32::try_from(signal_index).map_err(|_| Error::invalid("signal_index", "exceeds i32::MAX"))?;
        let size = std::mem::size_of::<T>();
        let local = source.buffer().device_address() + (source_offset * size) as u64;
        self.comm.line_up_launch(crate::collectives::launch!("ncclPutSignal"))?;
        let (_read, _write) = (source.buffer().use_guard(stream), self.buffer().use_guard(stream));
        // SAFETY: our live communicator and windows, a stream of its device, `count` Ts inside this rank's part of
        // the source window and a destination range inside the peer's (same-sized) part of this window.
        let progress = unsafe {
            result::put_signal(
                self.comm.library(),
                local as _,
                count,
                T::DATATYPE,
                peer as i32,
                raw,
                offset * size,
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

impl<T: Element, M: Mode> Window<'_, T, M> {
    /// The NCCL communicator the window is registered on, for the launch's check that a kernel's windows and device
    /// communicator belong to one ([`Error::MixedCommunicators`]).
    pub(crate) fn communicator_handle(&self) -> usize {
        self.comm.raw() as usize
    }

    /// What a CUDA graph recording a kernel over this window keeps ([`super::CloseWatch`]).
    pub(crate) fn close_watch(&self) -> super::CloseWatch {
        self.comm.close_watch()
    }
}

impl<T: DeviceRepr, M: Mode> Drop for Window<'_, T, M> {
    fn drop(&mut self) {
        let Some(buffer) = self.buffer.as_ref() else {
            return; // into_buffer took it (and deregistered the window)
        };
        let Some((id, _)) = &self.id else {
            return self.drop_unresolved();
        };
        // Kernels and collectives this rank enqueued may still use the window: finish them before deregistering.
        // Never the whole device: on a shared GPU a peer's kernel may be waiting for this rank (docs/multi-rank.md).
        if let Err(error) = buffer.wait_for_uses() {
            // Work may still read or write the window, this rank's memory or (through its peers' mappings) theirs:
            // deregistering or freeing it now would pull it from under that work. Leak both; NCCL frees the
            // registration with the communicator.
            tracing::error!(
                %error,
                "waiting for a window's last use failed; leaking its registration and its memory (the communicator's \
                 abort or destroy frees the registration)"
            );
            std::mem::forget(self.buffer.take());
            return;
        }
        if let Err(error) = self.comm.release_resource(*id) {
            tracing::error!(%error, "ncclCommWindowDeregister failed");
        }
    }
}

impl<T: DeviceRepr, M: Mode> Window<'_, T, M> {
    /// Drop of a window whose handle was never read (a `Pending` dropped or failed): deregisters it if NCCL has
    /// written it by now; leaks the slot, the buffer and the size exchange if NCCL may still write (its group is open,
    /// or the operation still runs), since freeing any under NCCL's feet is what this type exists to prevent.
    fn drop_unresolved(&mut self) {
        if self.completion.settled() {
            return; // NCCL finished and wrote no window: nothing to deregister, the buffer is ours to free
        }
        match self.completion.progress() {
            Ok(result::Progress::Done) => {
                let raw = *self.slot;
                if !raw.is_null() {
                    // SAFETY: NCCL wrote `raw` on our communicator and it was never registered or handed out.
                    let deregistered =
                        unsafe { result::comm_window_deregister(self.comm.library(), self.comm.raw(), raw) };
                    if let Err(error) = deregistered {
                        tracing::error!(%error, "ncclCommWindowDeregister of an unresolved window failed");
                    }
                }
                // The size exchange's all-gather, if any, was enqueued on its buffers' own stream: their frees are
                // ordered after it.
            }
            outcome => {
                tracing::warn!(
                    error = outcome.err().map(|e| e.to_string()),
                    "dropped a window NCCL has not written (its group is open, its registration still runs or \
                     failed): leaking its handle slot and buffer, which NCCL may still use"
                );
                std::mem::forget(self.buffer.take());
                std::mem::forget(self.sizes.take());
                Box::leak(std::mem::replace(&mut self.slot, Box::new(std::ptr::null_mut())));
            }
        }
    }
}

impl<T: DeviceRepr, M: Mode> std::fmt::Debug for Window<'_, T, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let raw = self.id.as_ref().map(|_| *self.slot);
        f.debug_struct("Window").field("raw", &raw).field("buffer", &self.buffer).finish()
    }
}
