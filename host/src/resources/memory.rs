//! `DeviceBuffer`: device memory from `ncclMemAlloc` (CUDA VMM), the kind symmetric windows need.

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::{
    sys::CUdeviceptr, CudaEvent, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice, SyncOnDrop,
};

use crate::error::Error;
use crate::result;
use crate::sys::Library;

/// `len` elements of `T` in device memory allocated with `ncclMemAlloc`.
///
/// Usable wherever cudarc buffers are (it implements cudarc's `DevicePtr`/`DevicePtrMut`), and the only
/// memory [`Communicator::window`](crate::Communicator::window) accepts. Its contents start undefined:
/// fill it before reading it.
///
/// Freed with `ncclMemFree` on drop, once its last use is done: every use through weft (a launch, a collective)
/// or cudarc's `DevicePtr` traits records an event on the stream of that use, and the drop waits for that event
/// and for the buffer's own stream. It never waits for the whole device: on a GPU shared by several ranks, a
/// peer's kernel may be waiting for this rank (docs/multi-rank.md). Uses on several streams must be ordered
/// among themselves (as NCCL requires of concurrent uses anyway): the event follows the last one enqueued.
pub struct DeviceBuffer<T> {
    ptr: CUdeviceptr,
    len: usize,
    stream: Arc<CudaStream>,
    /// Recorded after each use through cudarc's `DevicePtr` traits (collectives, copies, slice arguments).
    last_use: Option<CudaEvent>,
    /// The streams weft launched kernels on that use the buffer (as a window).
    launches: StreamsUsed,
    library: &'static Library,
    element: PhantomData<T>,
}

// SAFETY: the buffer is plain device memory addressed by an integer; it carries no thread-bound state,
// and access through `&self`/`&mut self` follows Rust's aliasing rules for the host-side handle.
unsafe impl<T: Send> Send for DeviceBuffer<T> {}
// SAFETY: shared references only read the pointer and length.
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
        let last_use = Some(stream.context().new_event(None)?);
        stream.context().bind_to_thread()?;
        // SAFETY: the stream's context is current on this thread.
        let ptr = unsafe { result::mem_alloc(library, bytes) }?;
        Ok(DeviceBuffer {
            ptr: ptr as CUdeviceptr,
            len,
            stream: stream.clone(),
            last_use,
            launches: StreamsUsed::default(),
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
        self.stream.context().bind_to_thread()?;
        // The stream's earlier work first, without holding a driver lock (crate::cuda::settle).
        crate::cuda::settle(&self.stream)?;
        // SAFETY: both ranges hold `len` elements of T; the copy is synchronous on the buffer's stream,
        // which orders it after earlier work on that stream.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(self.ptr, host, self.stream.cu_stream())?;
        }
        crate::cuda::settle(&self.stream)?;
        Ok(())
    }

    /// Copies the buffer to a new host vector (blocking).
    pub fn copy_to_host(&self) -> Result<Vec<T>, Error>
    where
        T: Default + Clone,
    {
        let mut host = vec![T::default(); self.len];
        self.stream.context().bind_to_thread()?;
        crate::cuda::settle(&self.stream)?;
        // SAFETY: both ranges hold `len` elements of T; the stream is synchronized before `host` is read.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(&mut host, self.ptr, self.stream.cu_stream())?;
        }
        crate::cuda::settle(&self.stream)?;
        Ok(host)
    }

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
}

impl<T> DeviceBuffer<T> {
    /// A guard that, dropped after work using the buffer was enqueued on `stream`, records that work as the
    /// buffer's last use (what its drop waits for). Work on the buffer's own stream needs no event: the drop waits
    /// for that stream anyway (an event record is a driver call, ~0.3 µs, on every collective's path).
    pub(crate) fn use_guard<'a>(&'a self, stream: &'a CudaStream) -> SyncOnDrop<'a> {
        if stream.cu_stream() == self.stream.cu_stream() {
            return SyncOnDrop::Record(None);
        }
        SyncOnDrop::record_event(&self.last_use, stream)
    }

    /// Records that a kernel using the buffer was launched on `stream` (what its drop waits for).
    pub(crate) fn note_launch(&self, stream: &Arc<CudaStream>) {
        self.launches.note(stream);
    }

    /// Waits for the buffer's last recorded use, the streams kernels using it were launched on, and its own stream:
    /// after this, nothing this rank enqueued still touches it. Never waits for the whole device, and polls (holds no
    /// driver lock while waiting: a peer rank of the process may need it to launch what these wait for). A stream a
    /// wait already gave up on, its work still unfinished, fails at once ([`crate::cuda::settle_before_free`]).
    pub(crate) fn wait_for_uses(&self) -> Result<(), Error> {
        if let Some(event) = &self.last_use {
            crate::cuda::settle_event(event, crate::cuda::SETTLE_TIMEOUT)?;
        }
        self.launches.wait()?;
        crate::cuda::settle_before_free(&self.stream)?;
        Ok(())
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
        if crate::cuda::stream_wait_before_peers(stream.context().ordinal()) {
            warn_stream_wait_before_peers();
        }
        // The drop waits for `stream` from now on: the wait reads the flag until it is satisfied.
        self.note_launch(stream);
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

impl<T> DevicePtr<T> for DeviceBuffer<T> {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        // Work on other streams is ordered by the caller (as with raw NCCL); the guard records this use.
        (self.ptr, self.use_guard(stream))
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
        // SAFETY: `ptr` came from ncclMemAlloc of this library, windows over it borrow the buffer (so they are
        // gone), and the work this rank enqueued on it is done.
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
