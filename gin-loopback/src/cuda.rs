//! The engine on a GPU: a non-blocking CUDA stream of the context that created the RMA context.
//!
//! A put is a `cuMemcpyAsync` on that stream (a copy engine moves the bytes: no kernel, so a put never needs SMs
//! that the ranks' own kernels, spinning at a barrier, may hold); the stream does not synchronize with the legacy
//! default stream, so nothing waits for the users' kernels. Host sources (NCCL's inline values) are staged through
//! pinned memory first, so the copy stays asynchronous. A signal is read, added to and written back under one
//! process-wide lock, each step finished before the next: exact whatever number of ranks add to one word at once,
//! at the price of two round trips per signal (CUDA 13.0's stream memory operations have no atomic add; a driver
//! with CUDA 13.1's `CU_STREAM_MEM_OP_ATOMIC_REDUCTION` could make it one asynchronous operation).

use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::driver::sys::{self, CUcontext, CUevent, CUresult, CUstream};

use crate::engine::{Engine, Marker};
use crate::error::{Error, Result};

/// Bytes of each staging slot: NCCL's inline puts carry at most 8.
const SLOT_BYTES: usize = 64;
/// Staging slots per engine; when all are in flight the engine waits for its own stream and reuses them.
const SLOTS: usize = 256;

/// Serializes every signal addition of the process (see the module docs).
static SIGNALS: Mutex<()> = Mutex::new(());

fn check(call: &str, result: CUresult) -> Result<()> {
    if result == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::cuda(call, result))
    }
}

#[derive(Debug)]
struct State {
    free_events: Vec<CUevent>,
    free_slots: Vec<usize>,
    slots_in_flight: Vec<usize>,
}

/// The CUDA engine of one RMA context.
#[derive(Debug)]
pub(crate) struct CudaEngine {
    context: CUcontext,
    stream: CUstream,
    /// `SLOTS` staging slots, then the 8-byte word signals are read into.
    pinned: *mut u8,
    state: Mutex<State>,
}

// SAFETY: the context, stream and pinned memory are driver handles and a host allocation this engine owns; the
// driver's calls on them are thread-safe once the context is current (each call makes it current first), and the
// mutable bookkeeping sits behind `state`'s mutex. The pinned signal word is only touched under `SIGNALS`.
unsafe impl Send for CudaEngine {}
// SAFETY: as for Send.
unsafe impl Sync for CudaEngine {}

impl CudaEngine {
    /// An engine on the CUDA context current on this thread (NCCL's, for the rank creating its device communicator).
    pub(crate) fn on_current_context() -> Result<CudaEngine> {
        // SAFETY: cuInit takes no pointer and may be called any number of times.
        check("cuInit", unsafe { sys::cuInit(0) })?;
        let mut context: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one handle into a live local.
        check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut context) })?;
        if context.is_null() {
            return Err(Error::usage("no CUDA context is current on the thread creating the GIN context"));
        }
        let mut stream: CUstream = std::ptr::null_mut();
        // SAFETY: writes one handle into a live local; the flag is a valid CUstream_flags value.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut stream, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        })?;
        let mut pinned: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one pointer into a live local; the size is non-zero.
        let allocated = check("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut pinned, SLOTS * SLOT_BYTES + 8, 0) });
        if let Err(error) = allocated {
            // SAFETY: the stream was created above and nothing was enqueued on it.
            unsafe { sys::cuStreamDestroy_v2(stream) };
            return Err(error);
        }
        Ok(CudaEngine {
            context,
            stream,
            pinned: pinned.cast(),
            state: Mutex::new(State {
                free_events: Vec::new(),
                free_slots: (0..SLOTS).rev().collect(),
                slots_in_flight: Vec::new(),
            }),
        })
    }

    fn make_current(&self) -> Result<()> {
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one handle into a live local.
        check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut current) })?;
        if current != self.context {
            // SAFETY: the context is NCCL's primary context of this rank's GPU, alive while its communicator is.
            check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.context) })?;
        }
        Ok(())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stream_synchronize(&self) -> Result<()> {
        // SAFETY: the stream is this engine's own and alive.
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(self.stream) })
    }

    /// A free staging slot, waiting for this engine's own stream if every slot is in flight.
    fn slot(&self) -> Result<usize> {
        let mut state = self.state();
        if state.free_slots.is_empty() {
            self.stream_synchronize()?;
            let done = std::mem::take(&mut state.slots_in_flight);
            state.free_slots.extend(done);
        }
        let slot = state.free_slots.pop().expect("slots were reclaimed");
        state.slots_in_flight.push(slot);
        Ok(slot)
    }
}

impl Engine for CudaEngine {
    fn copy(&self, destination: u64, source: u64, bytes: usize, source_is_host: bool) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.make_current()?;
        let mut from = source;
        if source_is_host && bytes <= SLOT_BYTES {
            let slot = self.slot()?;
            // SAFETY: the slot lies inside the pinned allocation (slot < SLOTS) and no queued copy reads it (it was
            // free); the source is `bytes` bytes of live host memory that NCCL registered and the caller checked.
            let staged = unsafe { self.pinned.add(slot * SLOT_BYTES) };
            // SAFETY: see above; the two ranges do not overlap (one is this engine's private allocation).
            unsafe { std::ptr::copy_nonoverlapping(source as *const u8, staged, bytes) };
            from = staged as u64;
        }
        // SAFETY: both ranges were checked against live registrations of this process (or are this engine's pinned
        // slot); unified addressing tells the driver which side is host and which is device memory.
        check("cuMemcpyAsync", unsafe { sys::cuMemcpyAsync(destination, from, bytes, self.stream) })
    }

    fn add(&self, address: u64, value: u64) -> Result<()> {
        self.make_current()?;
        let _serialized = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the word after the staging slots is this engine's, 8 bytes of pinned memory, used only here
        // under SIGNALS.
        let word = unsafe { self.pinned.add(SLOTS * SLOT_BYTES) };
        // SAFETY: `address` is 8 bytes inside a live device registration (checked by the caller); the destination
        // is the pinned word above.
        check("cuMemcpyDtoHAsync", unsafe { sys::cuMemcpyDtoHAsync_v2(word.cast(), address, 8, self.stream) })?;
        self.stream_synchronize()?;
        // SAFETY: the copy into the word has completed (the stream was synchronized); the word is 8-byte aligned
        // (the pinned allocation is page-aligned and SLOTS * SLOT_BYTES is a multiple of 8).
        unsafe {
            let sum = std::ptr::read_volatile(word.cast::<u64>()).wrapping_add(value);
            std::ptr::write_volatile(word.cast::<u64>(), sum);
        }
        // SAFETY: as for the read, in the other direction.
        check("cuMemcpyHtoDAsync", unsafe { sys::cuMemcpyHtoDAsync_v2(address, word.cast(), 8, self.stream) })?;
        self.stream_synchronize()
    }

    fn mark(&self) -> Result<Marker> {
        self.make_current()?;
        let reused = self.state().free_events.pop();
        let event = match reused {
            Some(event) => event,
            None => {
                let mut event: CUevent = std::ptr::null_mut();
                // SAFETY: writes one handle into a live local.
                check("cuEventCreate", unsafe {
                    sys::cuEventCreate(&mut event, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
                })?;
                event
            }
        };
        // SAFETY: the event and the stream are this engine's own, in the current context.
        check("cuEventRecord", unsafe { sys::cuEventRecord(event, self.stream) })?;
        Ok(Marker(event as usize))
    }

    fn is_done(&self, marker: Marker) -> Result<bool> {
        self.make_current()?;
        // SAFETY: the marker is an event this engine created and has not destroyed (markers come back by release).
        match unsafe { sys::cuEventQuery(marker.0 as CUevent) } {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => Err(Error::cuda("cuEventQuery", other)),
        }
    }

    fn release(&self, marker: Marker) {
        self.state().free_events.push(marker.0 as CUevent);
    }

    fn synchronize(&self) -> Result<()> {
        self.make_current()?;
        self.stream_synchronize()
    }
}

impl Drop for CudaEngine {
    fn drop(&mut self) {
        if let Err(error) = self.make_current().and_then(|()| self.stream_synchronize()) {
            crate::log::warn(&format!("destroying an RMA context: {error}"));
        }
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for event in state.free_events.drain(..) {
            // SAFETY: the event is this engine's and no marker refers to it any more (it was released).
            unsafe { sys::cuEventDestroy_v2(event) };
        }
        // SAFETY: the stream is idle (synchronized above) and nothing else holds it.
        unsafe { sys::cuStreamDestroy_v2(self.stream) };
        // SAFETY: the pinned memory was allocated by cuMemHostAlloc and no copy reads or writes it any more.
        unsafe { sys::cuMemFreeHost(self.pinned.cast()) };
    }
}
