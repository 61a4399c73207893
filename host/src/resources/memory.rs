//! `DeviceBuffer`: device memory from `ncclMemAlloc` (CUDA VMM), the kind symmetric windows need.

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::{sys::CUdeviceptr, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice, SyncOnDrop};

use super::uses::{Access, StreamUses};

use crate::error::Error;
use crate::result;
use crate::sys::Library;

/// `len` elements of `T` in device memory allocated with `ncclMemAlloc`.
///
/// Usable wherever cudarc buffers are (it implements cudarc's `DevicePtr`/`DevicePtrMut`), and the only
/// memory [`Communicator::window`](crate::Communicator::window) accepts. Its contents start undefined:
/// fill it before reading it.
///
/// It may be used on any stream of its device, and keeps track of every one (`resources::uses`): a use on one
/// stream waits, on the device, for the pending writes on the others (a write for every pending use), as cudarc's
/// `CudaSlice` does for its last reader and writer; host copies wait for what they must follow; and the drop, which
/// frees it with `ncclMemFree`, waits for every stream that used it, each to its last use. It never waits for the
/// whole device: on a GPU shared by several ranks, a peer's kernel may be waiting for this rank
/// (docs/multi-rank.md). While a live CUDA graph records it, asynchronous uses that conflict with the graph's must
/// be on the graph's replay stream ([`crate::graph`]).
pub struct DeviceBuffer<T> {
    ptr: CUdeviceptr,
    len: usize,
    stream: Arc<CudaStream>,
    uses: StreamUses,
    library: &'static Library,
    element: PhantomData<T>,
}

// SAFETY: the buffer is plain device memory addressed by an integer; its use tracking is behind a lock and atomics,
// and access through `&self`/`&mut self` follows Rust's aliasing rules for the host-side handle.
unsafe impl<T: Send> Send for DeviceBuffer<T> {}
// SAFETY: shared references read the pointer and length, and note uses through the lock and atomics.
unsafe impl<T: Sync> Sync for DeviceBuffer<T> {}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Allocates `len` elements on the device of `stream`, which the buffer then uses for its own
    /// synchronization.
    pub fn new(stream: &Arc<CudaStream>, len: usize) -> Result<DeviceBuffer<T>, Error> {
        if len == 0 {
            return Err(Error::invalid("len", "allocate at least one element"));
        }
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::invalid("len", format!("{len} elements overflow the address space")))?;
        let library = crate::sys::library()?;
        stream.context().bind_to_thread()?;
        // SAFETY: the stream's context is current on this thread.
        let ptr = unsafe { result::mem_alloc(library, bytes) }?;
        Ok(DeviceBuffer {
            ptr: ptr as CUdeviceptr,
            len,
            stream: stream.clone(),
            uses: StreamUses::new(stream),
            library,
            element: PhantomData,
        })
    }

    /// A new buffer on `stream`'s device holding a copy of `host` (blocking): [`new`](Self::new), then
    /// [`copy_from_host`](Self::copy_from_host).
    pub fn from_host(stream: &Arc<CudaStream>, host: &[T]) -> Result<DeviceBuffer<T>, Error> {
        let mut buffer = DeviceBuffer::new(stream, host.len())?;
        buffer.copy_from_host(host)?;
        Ok(buffer)
    }

    /// Copies `host` into the buffer (blocking). Lengths must match.
    pub fn copy_from_host(&mut self, host: &[T]) -> Result<(), Error> {
        self.overwrite_from_host(host)
    }

    /// [`copy_from_host`](Self::copy_from_host) through a shared borrow: for buffers a CUDA graph holds
    /// ([`crate::graph::Graph::write`] orders it after the replays). Device memory is never borrowed by Rust code,
    /// so writing it through `&self` aliases nothing; the ordering against kernels is the stream's.
    pub(crate) fn overwrite_from_host(&self, host: &[T]) -> Result<(), Error> {
        if host.len() != self.len {
            return Err(Error::invalid("host", format!("holds {} elements, the buffer {}", host.len(), self.len)));
        }
        self.write_elements_from_host(0, host, "DeviceBuffer::copy_from_host")
    }

    /// Copies `host` into elements `offset..offset + host.len()` (blocking), after every use of the buffer on every
    /// stream: [`copy_from_host`](Self::copy_from_host), and a view of registered memory's
    /// ([`super::RegisteredMut::copy_from_host`]). `call` names the caller in errors.
    pub(crate) fn write_elements_from_host(&self, offset: usize, host: &[T], call: &'static str) -> Result<(), Error> {
        self.check_elements(offset, host.len())?;
        crate::graph::refuse_foreign_capture(call, &self.stream)?;
        self.stream.context().bind_to_thread()?;
        // Every use on every stream first, without holding a driver lock (crate::cuda::settle).
        self.uses.settle_for_host(Access::Write)?;
        let address = self.ptr + (offset * std::mem::size_of::<T>()) as CUdeviceptr;
        // SAFETY: `host` holds as many Ts as elements `offset..` of the buffer that it is copied to, which lie inside
        // the allocation (checked above); every use of the buffer enqueued so far is done (settled above), and the
        // copy is waited for below, before any later use can be enqueued.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(address, host, self.stream.cu_stream())?;
        }
        crate::cuda::settle(&self.stream)?;
        Ok(())
    }

    /// Copies the buffer to a new host vector (blocking).
    pub fn copy_to_host(&self) -> Result<Vec<T>, Error>
    where
        T: Default + Clone,
    {
        self.read_elements_to_host(0, self.len, "DeviceBuffer::copy_to_host")
    }

    /// Copies elements `offset..offset + len` to a new host vector (blocking), after the writes of the buffer on
    /// every stream: [`copy_to_host`](Self::copy_to_host), and a view of registered memory's. `call` names the
    /// caller in errors.
    pub(crate) fn read_elements_to_host(&self, offset: usize, len: usize, call: &'static str) -> Result<Vec<T>, Error>
    where
        T: Default + Clone,
    {
        self.check_elements(offset, len)?;
        let mut host = vec![T::default(); len];
        crate::graph::refuse_foreign_capture(call, &self.stream)?;
        self.stream.context().bind_to_thread()?;
        // The writes on every stream first, without holding a driver lock.
        self.uses.settle_for_host(Access::Read)?;
        let address = self.ptr + (offset * std::mem::size_of::<T>()) as CUdeviceptr;
        // SAFETY: `host` holds `len` Ts, as many as elements `offset..offset + len` of the buffer, which lie inside
        // the allocation (checked above); every write enqueued so far is done (settled above); the stream is
        // synchronized before `host` is read.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(&mut host, address, self.stream.cu_stream())?;
        }
        crate::cuda::settle(&self.stream)?;
        Ok(host)
    }

    /// Refuses elements `offset..offset + len` unless they lie inside the buffer.
    fn check_elements(&self, offset: usize, len: usize) -> Result<(), Error> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::invalid(
                "range",
                format!("elements {offset}..{offset}+{len} reach past the buffer's {} elements", self.len),
            )),
        }
    }
}

impl<T> DeviceBuffer<T> {
    /// The device address of the first element.
    pub fn device_address(&self) -> CUdeviceptr {
        self.ptr
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no elements (never: allocation requires one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size in bytes.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Orders a use on `stream` (`held`: the same stream as an `Arc`, when the caller has one) after the conflicting
    /// uses on other streams and notes it; drop the guard once the use is enqueued. See [`StreamUses::begin`].
    pub(crate) fn begin_use<'a>(
        &'a self,
        stream: &'a CudaStream,
        held: Option<&Arc<CudaStream>>,
        access: Access,
    ) -> Result<SyncOnDrop<'a>, Error> {
        self.uses.begin(stream, held, access)
    }

    /// Claims the buffer for the replays on `replay` of the graph alive while `graph` is ([`StreamUses::claim`]).
    pub(crate) fn claim_for_graph(
        &self,
        graph: &Arc<()>,
        replay: &Arc<CudaStream>,
        access: Access,
    ) -> Result<(), Error> {
        self.uses.claim(graph, replay, access)
    }

    /// [`begin_use`](Self::begin_use) for a write on a borrowed stream, where no error can be returned: a failure is
    /// logged, and the drop then leaks the memory (`Window::put_signal`).
    pub(crate) fn use_guard<'a>(&'a self, stream: &'a CudaStream) -> SyncOnDrop<'a> {
        self.untracked_use_guard(stream, Access::Write)
    }

    /// [`begin_use`](Self::begin_use) on a borrowed stream where no error can be returned (cudarc's `DevicePtr`
    /// traits): a failure is logged, and the drop then leaks the memory rather than free it under that use.
    pub(crate) fn untracked_use_guard<'a>(&'a self, stream: &'a CudaStream, access: Access) -> SyncOnDrop<'a> {
        self.begin_use(stream, None, access).unwrap_or_else(|error| {
            self.uses.lost_track(&error);
            SyncOnDrop::Record(None)
        })
    }

    /// Waits for every use on every stream: after this, nothing this rank enqueued still touches it. Never waits for
    /// the whole device, and polls (holds no driver lock while waiting: a peer rank of the process may need it to
    /// launch what these wait for). A stream a wait already gave up on, its work still unfinished, fails at once
    /// ([`crate::cuda::settle_before_free`]), as does a buffer one of whose uses could not be tracked.
    pub(crate) fn wait_for_uses(&self) -> Result<(), Error> {
        self.uses.settle_before_free()
    }

    /// The device address for a read on `stream`, noting the use (the drop waits for it) but not ordering it after
    /// pending writes on other streams: for work the caller orders itself, like a GEMM on one stream that waits for
    /// device flags ([`DeviceBuffer::stream_wait_at_least`]) which a kernel on another stream raises as each part of
    /// the buffer is written. Record the use by dropping the guard once the work is enqueued.
    ///
    /// The read is noted for the drop only: later writes on other streams and host copies do not wait for it.
    ///
    /// # Safety
    /// The work enqueued on `stream` with this address only reads the buffer, and reads each element only after
    /// every write of it enqueued so far on other streams has completed (by a stream wait on flags raised after those
    /// writes, an event, or the host having waited); and every write of the buffer enqueued later, on another stream
    /// or by the host, waits for that work first (an event, or a host wait).
    pub unsafe fn device_ptr_unordered<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        let guard = self.uses.note_unordered(stream, None).unwrap_or_else(|error| {
            self.uses.lost_track(&error);
            SyncOnDrop::Record(None)
        });
        (self.ptr, guard)
    }
}

impl DeviceBuffer<u32> {
    /// Makes `stream` wait, on the device, until flag `index` of this buffer is at least `value`
    /// (`cuStreamWaitValue32`, `CU_STREAM_WAIT_VALUE_GEQ`): what is enqueued on `stream` afterwards starts only once
    /// a kernel running on another stream has raised the flag. The host does not wait. This is how a GEMM on one
    /// stream starts on a chunk as soon as a communication kernel on another says the chunk is in place (kit's
    /// `allgather_signal`). Use increasing values (an epoch per round) so that the flags never need resetting.
    ///
    /// A flag that is never raised leaves `stream` waiting: wait for it with a deadline (`cuda::settle_within`), and
    /// the buffer's drop, which waits for `stream`, reports `Error::Stalled` after `cuda::SETTLE_TIMEOUT` and leaks
    /// the memory rather than free it under the waiting stream.
    ///
    /// Enqueue the wait after the work that raises the flag, including what that work waits for: CUDA does not see
    /// the order a stream wait sets up, and may queue work enqueued later behind it on the GPU (the CUDA driver
    /// API's warning on stream memory operations). Where that work is a peer rank's kernel on a GPU the ranks share,
    /// call [`Communicator::line_up_gpu_peers`](crate::Communicator::line_up_gpu_peers) between launching this
    /// rank's half and enqueuing the waits, as example 08 does. A wait enqueued where ranks of this process share
    /// the GPU, after this thread's last launch that waits for peers and before it lined up with them, logs a
    /// `tracing` warning once.
    pub fn stream_wait_at_least(&self, stream: &Arc<CudaStream>, index: usize, value: u32) -> Result<(), Error> {
        if index >= self.len {
            return Err(Error::invalid(
                "index",
                format!("flag {index} of a buffer of {} flags: use an index below its length", self.len),
            ));
        }
        if stream.context().ordinal() != self.stream.context().ordinal() {
            return Err(Error::invalid(
                "stream",
                format!(
                    "the flags live on CUDA device {}, the stream is of device {}: wait on a stream of the flags' \
                     device",
                    self.stream.context().ordinal(),
                    stream.context().ordinal()
                ),
            ));
        }
        crate::graph::refuse_foreign_capture("DeviceBuffer::stream_wait_at_least", stream)?;
        if crate::cuda::stream_wait_before_peers(stream.context().ordinal()) {
            warn_stream_wait_before_peers();
        }
        // The drop waits for `stream` from now on: the wait reads the flag until it is satisfied. Not ordered after
        // the flags' pending writes: those are what it waits for, raised while the writer runs.
        drop(self.uses.note_unordered(stream, Some(stream))?);
        stream.context().bind_to_thread()?;
        let address = self.ptr + (index * std::mem::size_of::<u32>()) as CUdeviceptr;
        // SAFETY: `address` is flag `index` of this live allocation (checked above), 4-byte aligned; the buffer
        // outlives the wait because its drop waits for `stream` (noted above); `stream` is a live stream of the same
        // device.
        let status = unsafe {
            cudarc::driver::sys::cuStreamWaitValue32_v2(
                stream.cu_stream(),
                address,
                value,
                cudarc::driver::sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as core::ffi::c_uint,
            )
        };
        status.result()?;
        Ok(())
    }
}

impl<T> DeviceSlice<T> for DeviceBuffer<T> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

/// cudarc's traits (its copies, cuBLAS): ordered like weft's own uses. They cannot return an error: a use that could
/// not be tracked is logged and makes the drop leak the memory (never free it under that use).
impl<T> DevicePtr<T> for DeviceBuffer<T> {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr, self.untracked_use_guard(stream, Access::Read))
    }
}

impl<T> DevicePtrMut<T> for DeviceBuffer<T> {
    fn device_ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr, self.use_guard(stream))
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // Work this rank enqueued may still use the memory: wait for it (not for the device: see the type's docs).
        if let Err(error) = self.wait_for_uses() {
            tracing::error!(%error, "waiting for the last use of an NCCL buffer failed; leaking it");
            return;
        }
        let _ = self.stream.context().bind_to_thread();
        // SAFETY: `ptr` came from ncclMemAlloc of this library; a window or registration over it owns the buffer and
        // deregisters it before letting it go (or leaks it), so none is left; and the work this rank enqueued on it,
        // on every stream, is done (waited for above).
        if let Err(error) = unsafe { result::mem_free(self.library, self.ptr as *mut core::ffi::c_void) } {
            tracing::error!(%error, "ncclMemFree failed");
        }
    }
}

impl<T> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer").field("ptr", &format_args!("{:#x}", self.ptr)).field("len", &self.len).finish()
    }
}

/// The streams weft launched kernels on that use a resource: noting one costs a lock and a pointer comparison on
/// the launch path (an event record would cost a driver call per launch); freeing the resource waits for each.
#[derive(Debug, Default)]
pub(crate) struct StreamsUsed(std::sync::Mutex<Vec<Arc<CudaStream>>>);

impl StreamsUsed {
    pub(crate) fn note(&self, stream: &Arc<CudaStream>) {
        let mut streams = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !streams.iter().any(|known| Arc::ptr_eq(known, stream)) {
            streams.push(stream.clone());
        }
    }

    /// Waits for every stream noted, before the resource is freed ([`crate::cuda::settle_before_free`]: a stream a
    /// wait already gave up on fails at once).
    pub(crate) fn wait(&self) -> Result<(), Error> {
        let streams = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for stream in streams.iter() {
            crate::cuda::settle_before_free(stream)?;
        }
        Ok(())
    }
}

/// Warns (once per process) of a stream wait enqueued on a GPU that ranks of this process share, by a thread that
/// has enqueued work waiting for its peers since it last lined up with them: if the flag is raised by work those
/// peers have yet to enqueue, the GPU may queue their launch behind this wait. A warning, not an error: a flag
/// raised by this rank's own work alone is safe, and weft cannot see which work raises it.
fn warn_stream_wait_before_peers() {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "DeviceBuffer::stream_wait_at_least on a GPU that ranks of this process share, after this rank enqueued \
             work that waits for its peers and before lining up with them: if peers' work raises the flag, call \
             Communicator::line_up_gpu_peers between launching this rank's half and enqueuing the waits, or the GPU \
             may queue a peer's launch behind this wait (docs/multi-rank.md, \"Stream waits on flags that peers raise\")"
        );
    }
}
