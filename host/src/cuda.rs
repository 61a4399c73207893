//! Checking for the CUDA driver before cudarc needs it, and the one CUDA context per device.
//!
//! cudarc loads libcuda on first use and panics when it cannot; weft asks first, so a machine without a GPU
//! driver gets [`Error::NoCudaDriver`] with the fix instead of a panic.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cudarc::driver::{CudaContext, CudaStream};

use crate::error::Error;

/// Whether the CUDA driver library can be loaded (checked once per process, with the names cudarc uses).
pub fn driver() -> Result<(), Error> {
    static FOUND: OnceLock<Result<(), String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let candidates: Vec<String> =
                ["cuda", "nvcuda"].iter().flat_map(|name| cudarc::get_lib_name_candidates(name)).collect();
            for candidate in &candidates {
                // SAFETY: loading libcuda runs only the driver's own initialisers; the handle is dropped at
                // once (cudarc loads its own), so no symbol is ever called through it.
                if unsafe { libloading::Library::new(candidate) }.is_ok() {
                    return Ok(());
                }
            }
            Err(format!("libcuda.so, libcuda.so.1 and {} other names cudarc knows", candidates.len().saturating_sub(2)))
        })
        .clone()
        .map_err(|tried| Error::NoCudaDriver { tried })
}

/// The number of CUDA devices the driver reports; [`Error::NoCudaDriver`] when there is no driver.
pub fn device_count() -> Result<usize, Error> {
    driver()?;
    let count = cudarc::driver::CudaContext::device_count()?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// The one [`CudaContext`] of CUDA device `device` in this process (its primary context), shared by every
/// communicator, stream and kernel weft creates on that device.
///
/// Why one: ranks that share a GPU share its primary context, and cudarc makes a *new* `CudaContext` value per
/// call whose first stream synchronizes the whole context. A rank that is still on its way to a kernel launch
/// must never wait for the whole device: a peer's kernel already on the device may be spinning at a barrier for
/// this rank's kernel, and would wait forever (docs/multi-rank.md, "What must never wait for the device"). The
/// shared context is put into cudarc's several-streams mode once, when it is created, and kept there by a stream
/// held here for the life of the process.
pub fn context(device: usize) -> Result<Arc<CudaContext>, Error> {
    static CONTEXTS: Mutex<Vec<Option<SharedContext>>> = Mutex::new(Vec::new());
    let count = device_count()?;
    if device >= count {
        return Err(Error::invalid(
            "device",
            format!("CUDA device {device} does not exist: this machine has {count} (valid: 0..{count})"),
        ));
    }
    let mut contexts = CONTEXTS.lock().unwrap_or_else(PoisonError::into_inner);
    if contexts.len() < count {
        contexts.resize_with(count, || None);
    }
    if let Some(shared) = &contexts[device] {
        return Ok(shared.context.clone());
    }
    let context = CudaContext::new(device)?;
    // The first stream of a `CudaContext` value synchronizes the device (cudarc's switch to event tracking);
    // paying it here, before any rank of this process launched anything, is the only time it is harmless.
    let pinned = context.new_stream()?;
    contexts[device] = Some(SharedContext { context: context.clone(), _pinned: pinned });
    Ok(context)
}

/// A device's shared context and the stream that keeps cudarc in its several-streams mode.
struct SharedContext {
    context: Arc<CudaContext>,
    _pinned: Arc<CudaStream>,
}

/// Devices (ordinals below 64) whose ranks sharing the GPU have started communicating in this process: a collective
/// or a launch of a kernel taking a device communicator, by a communicator with several ranks on its GPU.
static SHARED_GPU_TRAFFIC: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

thread_local! {
    /// Set inside `Communicator::with_gpu_peers_idle`: loads there are lined up with the peers.
    static LOADING_TOGETHER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Set when this thread enqueues work that waits for peers sharing its GPU (a collective, a launch of a kernel
    /// taking a device communicator); cleared when it lines up with them (`placement::LocalGroup::line_up`).
    static PEER_WORK_SINCE_LINE_UP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Records that ranks sharing `device` communicate (weft's collectives and device-communicator launches call it),
/// and that this thread has enqueued work waiting for its peers since it last lined up with them.
pub(crate) fn note_shared_gpu_traffic(device: usize) {
    if device < 64 {
        SHARED_GPU_TRAFFIC.fetch_or(1 << device, std::sync::atomic::Ordering::Relaxed);
    }
    PEER_WORK_SINCE_LINE_UP.with(|flag| flag.set(true));
}

/// Records that this thread has lined up with the ranks sharing its GPU: every peer has enqueued what it enqueued
/// before the line-up.
pub(crate) fn note_lined_up() {
    PEER_WORK_SINCE_LINE_UP.with(|flag| flag.set(false));
}

/// Whether a stream wait on a device flag, enqueued now on `device`, risks the hang of docs/multi-rank.md ("Stream
/// waits on flags that peers raise"): ranks share the device and this thread has enqueued work that waits for them
/// since it last lined up with them, so a peer may not have enqueued its half yet.
pub(crate) fn stream_wait_before_peers(device: usize) -> bool {
    shared_gpu_traffic(device) && PEER_WORK_SINCE_LINE_UP.with(std::cell::Cell::get)
}

/// Whether loading a module onto `device` now risks the hang of docs/multi-rank.md ("Load before launch"): ranks
/// sharing it have communicated, and this thread is not inside `with_gpu_peers_idle`.
pub(crate) fn late_load_on_shared_gpu(device: usize) -> bool {
    shared_gpu_traffic(device) && !LOADING_TOGETHER.with(std::cell::Cell::get)
}

/// Whether ranks sharing `device` have communicated in this process (ordinals past the mask never have).
fn shared_gpu_traffic(device: usize) -> bool {
    device < 64 && SHARED_GPU_TRAFFIC.load(std::sync::atomic::Ordering::Relaxed) & (1 << device) != 0
}

/// Runs `f` with this thread marked as loading in step with its GPU peers.
pub(crate) fn loading_together<R>(f: impl FnOnce() -> R) -> R {
    let before = LOADING_TOGETHER.with(|flag| flag.replace(true));
    let result = f();
    LOADING_TOGETHER.with(|flag| flag.set(before));
    result
}

/// Loads `function`'s code onto its device now, not at its first launch.
///
/// Under CUDA's lazy loading (the default) a kernel's code reaches the device at its first launch, and that load
/// may wait for the whole context. A rank sharing its GPU must not wait for the whole device on its way to a
/// launch (see [`context`]), so weft loads each kernel when it is looked up: the first rank to need it loads it,
/// before any peer can be waiting for it, and the others find it loaded.
pub fn load_now(
    function: &cudarc::driver::CudaFunction,
    context: &CudaContext,
) -> Result<(), cudarc::driver::DriverError> {
    context.bind_to_thread()?;
    // SAFETY: the handle belongs to a module `function` keeps loaded, in `context`, which is current.
    unsafe { cudarc::driver::sys::cuFuncLoad(function.cu_function()) }.result()
}

/// How long weft's own host copies ([`DeviceBuffer`](crate::DeviceBuffer) `copy_*`, [`Communicator::download`](
/// crate::Communicator::download)) wait for their stream before [`Error::Stalled`].
pub const SETTLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// [`settle_within`] [`SETTLE_TIMEOUT`]: the drop-in for `stream.synchronize()` where ranks of one process share a
/// GPU.
pub fn settle(stream: &CudaStream) -> Result<(), Error> {
    settle_within(stream, SETTLE_TIMEOUT)
}

/// Copies `src` to a new host vector once the stream's earlier work is done ([`settle`]): the drop-in for
/// `stream.clone_dtoh(src)` where ranks of one process share a GPU. With a communicator at hand,
/// [`Communicator::download`](crate::Communicator::download) also watches it for asynchronous errors.
///
/// `src` is memory weft vouches for (the sealed [`NcclBuffer`](crate::launch::NcclBuffer)): a type of one's own
/// reporting any address through cudarc's `DevicePtr` is refused at compile time.
pub fn download<T: cudarc::driver::DeviceRepr, Src: crate::launch::NcclBuffer<T> + cudarc::driver::DevicePtr<T>>(
    stream: &Arc<CudaStream>,
    src: &Src,
) -> Result<Vec<T>, Error> {
    crate::graph::refuse_foreign_capture("download", stream)?;
    settle(stream)?;
    Ok(stream.clone_dtoh(src)?)
}

/// Waits until everything enqueued on `stream` so far has finished by polling an event, holding no driver lock
/// while it waits; [`Error::Stalled`] when `timeout` passes first.
///
/// Why not `stream.synchronize()` or a copy that waits by itself: a thread blocked inside the driver waiting for
/// a stream — a copy to or from pageable host memory waits for the stream's earlier work there — holds a lock of
/// the context that other threads' launches and `cuEventCreate` need (seen on the H200 with driver 580:
/// docs/multi-rank.md, "Host copies"). When the awaited work is a kernel waiting for a peer rank of the same
/// process, that peer can then never launch, and both hang. Polling waits the same time without the lock.
pub fn settle_within(stream: &CudaStream, timeout: std::time::Duration) -> Result<(), Error> {
    settle_watching(stream, timeout, || Ok(()))
}

/// [`settle_within`], calling `watch` between polls: its error ends the wait (a communicator's asynchronous error,
/// for [`Communicator::wait`](crate::Communicator::wait)).
pub(crate) fn settle_watching(
    stream: &CudaStream,
    timeout: std::time::Duration,
    watch: impl FnMut() -> Result<(), Error>,
) -> Result<(), Error> {
    let marker = stream.record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))?;
    match settle_event_watching(&marker, timeout, watch) {
        Ok(()) => {
            // Everything enqueued before this marker is done, the work earlier waits gave up on included.
            GaveUp::forget(stream);
            Ok(())
        }
        Err(error) => {
            if matches!(error, Error::Stalled { .. }) {
                GaveUp::note(stream, marker, timeout);
            }
            Err(error)
        }
    }
}

/// [`settle`] for a free: waits for `stream` unless a wait on it has already given up ([`Error::Stalled`]) on work
/// that is still not done, and then fails at once with that wait's [`Error::Stalled`]. Work enqueued after an
/// unfinished marker cannot finish before it, so waiting again would only wait another [`SETTLE_TIMEOUT`] per
/// resource: a process whose device stopped would take minutes per buffer to drop its resources, which leak (never
/// freed under the stuck work) either way.
pub(crate) fn settle_before_free(stream: &CudaStream) -> Result<(), Error> {
    if let Some(after) = GaveUp::unfinished(stream) {
        return Err(Error::Stalled { operation: "work on the stream that an earlier wait gave up on", after });
    }
    settle(stream)
}

/// The markers of stream waits that gave up with the work unfinished, by stream (see [`settle_before_free`]); at
/// most [`GaveUp::KEPT`], the oldest forgotten first (a forgotten one only costs a free its full wait).
struct GaveUp {
    /// The stream's handle. A handle may be reused once its stream is destroyed; a marker found finished is
    /// forgotten, and one still unfinished means work is stuck on the device, so at worst a new stream's free leaks
    /// its memory (never frees it early).
    stream: usize,
    marker: cudarc::driver::CudaEvent,
    after: std::time::Duration,
}

static GAVE_UP: std::sync::Mutex<Vec<GaveUp>> = std::sync::Mutex::new(Vec::new());

impl GaveUp {
    const KEPT: usize = 256;

    fn note(stream: &CudaStream, marker: cudarc::driver::CudaEvent, after: std::time::Duration) {
        let mut gave_up = GAVE_UP.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if gave_up.len() >= Self::KEPT {
            gave_up.remove(0);
        }
        gave_up.push(GaveUp { stream: stream.cu_stream() as usize, marker, after });
    }

    /// Forgets `stream`'s markers (a wait on it has just seen all its work done).
    fn forget(stream: &CudaStream) {
        let handle = stream.cu_stream() as usize;
        GAVE_UP.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|entry| entry.stream != handle);
    }

    /// The deadline of a wait that gave up on `stream` with its marker still unfinished; finished ones are
    /// forgotten.
    fn unfinished(stream: &CudaStream) -> Option<std::time::Duration> {
        let handle = stream.cu_stream() as usize;
        let mut gave_up = GAVE_UP.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A marker whose query fails (a context error) cannot be trusted to finish: keep it, as unfinished.
        gave_up.retain(|entry| entry.stream != handle || !entry.marker.try_is_complete().unwrap_or(false));
        gave_up.iter().find(|entry| entry.stream == handle).map(|entry| entry.after)
    }
}

/// Waits until `event`'s recorded work has finished by polling it, holding no driver lock while it waits (see
/// [`settle_within`]); [`Error::Stalled`] when `timeout` passes first. The drop-in for `event.synchronize()`.
pub(crate) fn settle_event(event: &cudarc::driver::CudaEvent, timeout: std::time::Duration) -> Result<(), Error> {
    settle_event_watching(event, timeout, || Ok(()))
}

fn settle_event_watching(
    marker: &cudarc::driver::CudaEvent,
    timeout: std::time::Duration,
    mut watch: impl FnMut() -> Result<(), Error>,
) -> Result<(), Error> {
    let started = std::time::Instant::now();
    let mut pause = std::time::Duration::from_micros(5);
    loop {
        // SAFETY: `marker` is a live event (borrowed for the whole wait).
        match unsafe { cudarc::driver::result::event::query(marker.cu_event()) } {
            Ok(()) => return Ok(()),
            Err(error) if error.0 == cudarc::driver::sys::cudaError_enum::CUDA_ERROR_NOT_READY => {}
            Err(error) => return Err(error.into()),
        }
        watch()?;
        crate::spmd::peer_failure()?;
        if started.elapsed() >= timeout {
            return Err(Error::Stalled { operation: "the work enqueued on the stream", after: timeout });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_micros(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_load_is_flagged_only_after_shared_traffic_and_outside_with_gpu_peers_idle() {
        // Device 63: no test process has one, so no other test's traffic touches its bit.
        assert!(!late_load_on_shared_gpu(63));
        note_shared_gpu_traffic(63);
        assert!(late_load_on_shared_gpu(63));
        assert!(!loading_together(|| late_load_on_shared_gpu(63)), "loads lined up with the peers are fine");
        assert!(late_load_on_shared_gpu(63), "the mark ends with the closure");
        // Ordinals past the mask are never flagged (nor do they overflow the shift).
        note_shared_gpu_traffic(64);
        assert!(!late_load_on_shared_gpu(64));
    }

    #[test]
    fn a_stream_wait_is_flagged_after_peer_work_until_the_thread_lines_up() {
        // Device 62, on a thread of its own (the mark is per thread).
        std::thread::spawn(|| {
            assert!(!stream_wait_before_peers(62));
            note_shared_gpu_traffic(62);
            assert!(stream_wait_before_peers(62), "right after a launch that waits for peers");
            note_lined_up();
            assert!(!stream_wait_before_peers(62), "after lining up with them");
            note_shared_gpu_traffic(62);
            assert!(stream_wait_before_peers(62), "after the next one");
            assert!(!stream_wait_before_peers(64), "ordinals past the mask are never flagged");
        })
        .join()
        .unwrap();
    }
}
