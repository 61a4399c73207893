//! Which streams of one CUDA context share a hardware queue, probed on a GPU (docs/multi-rank.md, "Hardware queues").
//!
//! Ranks that are threads of one process share a context, and CUDA feeds its streams to the GPU through
//! `CUDA_DEVICE_MAX_CONNECTIONS` hardware queues. The stalls of 2026-12-04/05 fit streams of different ranks sharing
//! a queue, and the counts fit streams taking the queues in turn as they are created; neither is documented. This
//! probe measures it. For streams `first` and `other`: on `first` a kernel that spins until a word of page-locked
//! host memory is set, then a second kernel (which must wait for the first); then on `other` a kernel that sets the
//! word. With a queue of their own, `other`'s kernel runs at once and releases the spinner. In one shared queue it
//! sits behind `first`'s second kernel, which waits for the spinner: the word stays 0, and after a grace period the
//! host sets it itself, so nothing hangs.
//!
//! The control: with `CUDA_DEVICE_MAX_CONNECTIONS=1` every pair shares the one queue, and the probe must see it for
//! every pair (else it cannot see sharing at all; `scripts/gpu-check.sh`'s `queues` part runs it so). With more
//! queues it is a measurement: it prints which of the streams created after `first` share its queue, a fact about
//! CUDA on this machine for bench/RESULTS.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaStream, PinnedHostSlice};
use weft::host::jit::{self, KernelSpec};
use weft::host::launch::{launch_raw, ArgBuffer};
use weft::host::LaunchConfig;

/// Spins until the word at `release` (host memory mapped into the device) is non-zero.
const SPIN: KernelSpec = KernelSpec {
    name: "queue_probe_spin",
    source: r#"
extern "C" __global__ void queue_probe_spin(const volatile unsigned int* release) {
    while (*release == 0) {
        __nanosleep(1000);
    }
}
"#,
    entry_point: "queue_probe_spin",
};

/// Sets the word at `release` (host memory mapped into the device).
const RAISE: KernelSpec = KernelSpec {
    name: "queue_probe_raise",
    source: r#"
extern "C" __global__ void queue_probe_raise(volatile unsigned int* release) {
    *release = 1;
    __threadfence_system();
}
"#,
    entry_point: "queue_probe_raise",
};

/// How long the host waits for `other`'s kernel to release the spinner before it counts the pair as sharing.
const GRACE: Duration = Duration::from_millis(500);

/// Streams created after the first, one more than CUDA's most queues (32), so a turn-taking assignment wraps once.
const STREAMS: usize = 33;

struct Probe {
    /// Owns the page-locked word; only ever used through `word` while the probe lives.
    _release: PinnedHostSlice<u32>,
    /// The word, as a host pointer; with unified addressing also its device address.
    word: *mut u32,
    spin: cudarc::driver::CudaFunction,
    raise: cudarc::driver::CudaFunction,
}

impl Probe {
    fn new(ctx: &Arc<CudaContext>) -> Probe {
        // SAFETY: the word is written (`set`) before any kernel reads it.
        let mut release =
            unsafe { ctx.alloc_pinned_with_flags::<u32>(1, cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP) }.unwrap();
        let word = release.as_mut_ptr().unwrap();
        let (spin, raise) = (jit::function(ctx, &SPIN).unwrap(), jit::function(ctx, &RAISE).unwrap());
        Probe { _release: release, word, spin, raise }
    }

    fn set(&self, value: u32) {
        // SAFETY: `word` points to the live page-locked u32 `_release` owns; kernels read it or store 1 to it, and
        // both sides use volatile accesses.
        unsafe { std::ptr::write_volatile(self.word, value) };
    }

    fn get(&self) -> u32 {
        // SAFETY: as in `set`.
        unsafe { std::ptr::read_volatile(self.word) }
    }

    fn launch(&self, function: &cudarc::driver::CudaFunction, stream: &CudaStream) {
        let mut args = ArgBuffer::new();
        args.push(self.word as u64);
        // SAFETY: both probe kernels take one `unsigned int*`, the device address of the live page-locked word,
        // which outlives them (every stream is synchronized before the probe is dropped); one thread each.
        unsafe { launch_raw(function, stream, &LaunchConfig::linear(1, 1), &mut args).unwrap() };
    }

    /// Whether `other`'s kernel stayed stuck behind `first`'s waiting kernel (the two share a queue).
    fn shares(&self, first: &CudaStream, other: &CudaStream) -> bool {
        self.set(0);
        self.launch(&self.spin, first);
        // Waits for the spinner in stream order: it holds the queue's head until the spinner is released.
        self.launch(&self.spin, first);
        self.launch(&self.raise, other);
        let started = Instant::now();
        let mut stuck = true;
        while started.elapsed() < GRACE {
            if self.get() != 0 {
                stuck = false;
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // Releases both spinners (and `other`'s kernel, which then sets the word again).
        self.set(1);
        first.synchronize().unwrap();
        other.synchronize().unwrap();
        stuck
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn which_streams_share_a_hardware_queue() {
    let ctx = CudaContext::new(0).unwrap();
    let connections = std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").unwrap_or_else(|_| "unset (8)".into());
    let probe = Probe::new(&ctx);
    let first = ctx.new_stream().unwrap();
    let others: Vec<Arc<CudaStream>> = (0..STREAMS).map(|_| ctx.new_stream().unwrap()).collect();
    let shared: Vec<usize> =
        others.iter().enumerate().filter(|(_, other)| probe.shares(&first, other)).map(|(i, _)| i + 1).collect();
    println!(
        "CUDA_DEVICE_MAX_CONNECTIONS={connections}: of the {STREAMS} streams created after a stream, these share its \
         hardware queue (1 = the next one created): {shared:?}"
    );
    if connections == "1" {
        // The control: one queue for everything, so the probe must see every pair share it.
        assert_eq!(shared.len(), STREAMS, "the probe missed sharing in the one queue: it cannot see sharing");
    }
}
