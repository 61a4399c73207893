//! What never waits for the whole device, checked on a GPU.
//!
//! Ranks that share a GPU share its CUDA context. A rank on its way to a launch must not make a host call that waits
//! for every kernel of the context: a peer's kernel may already be spinning at a barrier for this rank's kernel, and
//! would spin forever (docs/multi-rank.md). This test runs each host call weft makes on that way (streams, buffers,
//! windows, device communicators, kernel lookup and launch, frees) while a kernel of the same context spins on
//! another stream until the host releases it: a call that has not returned after a grace period waits for the
//! device. The watchdog then releases the spinner, so nothing hangs. A positive control (`cuCtxSynchronize`) must
//! be seen waiting, which proves the probe can see it; calls outside weft's control are printed as facts.
//!
//! With the same spinner, a probe of which streams share one of CUDA's hardware queues (a kernel stuck behind another
//! stream's waiting one), with its one-queue control.

use weft_kit::test_kernels as kernels;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaStream, PinnedHostSlice};
use weft::host::caps::Lsa;
use weft::host::jit::{self, KernelSpec};

use weft::host::launch::{launch_raw, ArgBuffer};
use weft::host::{Communicator, Config, DevComm, DeviceBuffer, LaunchConfig, UniqueId, WindowFlags};

/// Spins until the word at `release` (host memory mapped into the device) is non-zero.
const SPIN: KernelSpec = KernelSpec {
    name: "spin_until_released",
    source: r#"
extern "C" __global__ void spin_until_released(const volatile unsigned int* release) {
    while (*release == 0) {
        __nanosleep(2000);
    }
}
"#,
    entry_point: "spin_until_released",
};

/// Sets the word at `release` (host memory mapped into the device): the queue probe's releasing kernel.
const RAISE: KernelSpec = KernelSpec {
    name: "raise_release",
    source: r#"
extern "C" __global__ void raise_release(volatile unsigned int* release) {
    *release = 1;
    __threadfence_system();
}
"#,
    entry_point: "raise_release",
};

/// How long a call may take, while the spinner runs, before it counts as waiting for the device.
const GRACE: Duration = Duration::from_secs(2);

struct Spinner {
    /// Owns the page-locked word; only ever read through `word` while the spinner lives.
    _release: PinnedHostSlice<u32>,
    /// The word, as a host pointer; with unified addressing also its device address.
    word: *mut u32,
    stream: Arc<CudaStream>,
    function: cudarc::driver::CudaFunction,
    /// Blocks of the spinning kernel.
    grid: u32,
}

impl Spinner {
    fn new(ctx: &Arc<CudaContext>) -> Spinner {
        // SAFETY: the word is written below before any kernel reads it.
        let mut release =
            unsafe { ctx.alloc_pinned_with_flags::<u32>(1, cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP) }.unwrap();
        // Unified addressing: page-locked host memory has the same address on the device.
        let word = release.as_mut_ptr().unwrap();
        let function = jit::function(ctx, &SPIN).unwrap();
        Spinner { _release: release, word, stream: ctx.new_stream().unwrap(), function, grid: 1 }
    }

    /// A plain store, no driver call: the watchdog must be able to release the spinner whatever the driver is doing.
    fn set(&self, value: u32) {
        // SAFETY: `word` points to the live page-locked u32 `_release` owns; the spinning kernel only reads it, and a
        // volatile store is what it polls.
        unsafe { std::ptr::write_volatile(self.word, value) };
    }

    fn get(&self) -> u32 {
        // SAFETY: as in `set`; kernels only read the word or store 1 to it, volatile on both sides.
        unsafe { std::ptr::read_volatile(self.word) }
    }

    /// Launches `function` (the spinner's, or RAISE: each takes the word's device address) on `stream` with `grid`
    /// blocks of 32 threads. The caller synchronizes `stream` before the spinner is dropped.
    fn launch(&self, function: &cudarc::driver::CudaFunction, stream: &CudaStream, grid: u32) {
        let mut args = ArgBuffer::new();
        args.push(self.word as u64);
        // SAFETY: both kernels take one `unsigned int*`, the device address of the live page-locked word, which
        // outlives them (every caller synchronizes the stream before the spinner, which owns the word, is dropped).
        unsafe { launch_raw(function, stream, &LaunchConfig::linear(grid, 32), &mut args).unwrap() };
    }

    /// Runs `call` while the spinner spins; whether it was still running after [`GRACE`] (it then waited for the
    /// device, or at least for the spinner).
    fn waits(&self, what: &str, call: impl FnOnce()) -> bool {
        eprintln!("probing: {what}");
        self.set(0);
        self.launch(&self.function, &self.stream, self.grid);
        std::thread::sleep(Duration::from_millis(20)); // let the spinner start
        let done = AtomicBool::new(false);
        let waited = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let started = Instant::now();
                while !done.load(Ordering::Acquire) {
                    if started.elapsed() > GRACE {
                        waited.store(true, Ordering::Release);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                self.set(1);
            });
            let started = Instant::now();
            call();
            done.store(true, Ordering::Release);
            let took = started.elapsed();
            println!(
                "{what:<58} {}",
                if waited.load(Ordering::Acquire) {
                    format!("WAITS for the device ({took:.2?})")
                } else {
                    format!("returns ({took:.2?})")
                }
            );
        });
        self.stream.synchronize().unwrap();
        waited.into_inner()
    }
}

/// Every probe in both spinner shapes: one block, and enough blocks to fill most of the GPU as co-resident peers'
/// kernels do (a call could behave differently when the GPU is full).
fn shapes(ctx: &Arc<CudaContext>, spinner: &Spinner) -> [(&'static str, u32); 2] {
    let resident =
        weft::host::launch::resident_blocks(&spinner.function, &spinner.stream, &LaunchConfig::linear(1, 32))
            .unwrap_or(132);
    let _ = ctx;
    [("1 block", 1), ("most of the GPU", u32::try_from(resident * 3 / 4).unwrap_or(u32::MAX).max(1))]
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn calls_on_a_ranks_way_to_a_launch_never_wait_for_the_whole_device() {
    let comm = Communicator::init_rank(0, 1, 0, &UniqueId::new().unwrap(), &Config::new()).unwrap();
    let ctx = comm.context().clone();
    let mut spinner = Spinner::new(&ctx);
    let s = ctx.new_stream().unwrap();
    let n = 16 << 20;
    let mut must_not_wait = Vec::new();
    // Compile the probed kernel beforehand (nvcc takes seconds, which would look like waiting).
    let arch = jit::GpuArch::from_compute_capability(ctx.compute_capability().unwrap());
    let request = jit::CompileRequest::new(
        kernels::barrier_round_trips::NAME,
        kernels::barrier_round_trips::SOURCE,
        weft::device::WEFT_CUH,
        arch,
    )
    .with_flags(jit::ArgAlignment::Aligned16.flags());
    let compiled = jit::compile_cubin(jit::toolchain().unwrap(), &request).unwrap();
    let entry = kernels::barrier_round_trips::spec().entry_point;
    let cfg = LaunchConfig::linear(4, 128);

    for (shape, grid) in shapes(&ctx, &spinner) {
        spinner.grid = grid;
        println!("--- spinner: {shape} ({grid} blocks)");
        let mut check = |what: &'static str, waited: bool| {
            if waited {
                must_not_wait.push(format!("{what} ({shape})"));
            }
        };
        // The probe sees a call that waits for the device.
        assert!(
            spinner.waits("control: cuCtxSynchronize", || ctx.synchronize().unwrap()),
            "the probe cannot see a wait"
        );

        // weft's own calls on a rank's way to a launch.
        let shared = || drop(weft::host::cuda::context(0).unwrap().new_stream().unwrap());
        check("new stream", spinner.waits("weft: new stream on the shared context", shared));
        let mut staged = None;
        check(
            "clone_htod",
            spinner.waits("cudarc: clone_htod 64 MB (pool alloc + pageable copy)", || {
                staged = Some(s.clone_htod(&vec![1.0f32; n]).unwrap())
            }),
        );
        check(
            "CudaSlice drop",
            spinner.waits("cudarc: drop a CudaSlice (stream-ordered free)", || drop(staged.take())),
        );
        let mut buffer = None;
        check(
            "DeviceBuffer::new",
            spinner.waits("weft: DeviceBuffer::new 64 MB (ncclMemAlloc)", || {
                buffer = Some(DeviceBuffer::<f32>::new(&s, n).unwrap())
            }),
        );
        check(
            "DeviceBuffer::copy_from_host",
            spinner.waits("weft: DeviceBuffer::copy_from_host 64 MB", || {
                buffer.as_mut().unwrap().copy_from_host(&vec![2.0f32; n]).unwrap()
            }),
        );
        check("DeviceBuffer drop", spinner.waits("weft: drop a DeviceBuffer (ncclMemFree)", || drop(buffer.take())));

        // Collective calls: with one rank they show the call's own work; the two-rank test below adds peers.
        let mut window = None;
        spinner.waits("fact, one rank: alloc_window (ncclMemAlloc + ncclCommWindowRegister)", || {
            window = Some(comm.alloc_window::<f32>(&s, n, WindowFlags::COLL_SYMMETRIC).unwrap())
        });
        let mut dev: Option<DevComm<'_, Lsa>> = None;
        spinner.waits("fact, one rank: dev_comm (ncclDevCommCreate)", || {
            dev = Some(comm.dev_comm(&kernels::barrier_round_trips::requirements(&cfg)).unwrap())
        });

        // Kernel loading, step by step, then a launch of an already-loaded kernel.
        let mut module = None;
        spinner.waits("fact: cuModuleLoadData of a cubin", || module = Some(jit::load(&ctx, &compiled).unwrap()));
        let module = module.unwrap();
        let function = jit::load_function(&module, kernels::barrier_round_trips::NAME, entry).unwrap();
        spinner.waits("fact: cuFuncLoad (weft::host::cuda::load_now)", || {
            weft::host::cuda::load_now(&function, &ctx).unwrap()
        });
        spinner.waits("fact: cuModuleUnload", || drop((function, module)));
        let mut done = s.clone_htod(&[0u32; 4]).unwrap();
        let mut launch =
            || kernels::barrier_round_trips::launch(&s, cfg, dev.as_ref().unwrap(), 10, &mut done).unwrap();
        spinner.waits("fact: first launch (compiled, not loaded: module load + cuFuncLoad + launch)", &mut launch);
        check("launch of a loaded kernel", spinner.waits("weft: launch of a loaded kernel", &mut launch));
        s.synchronize().unwrap();
        assert!(s.clone_dtoh(&done).unwrap().iter().all(|&d| d == 10), "the probed launches must still run correctly");
        check("DevComm drop", spinner.waits("weft: drop a DevComm (ncclDevCommDestroy)", || drop(dev.take())));
        check("Window drop", spinner.waits("weft: drop a Window (deregister + ncclMemFree)", || drop(window.take())));
        // The next shape loads the kernel afresh.
        weft::host::jit::KernelRegistry::global().clear();

        // Calls outside weft's control, for the record (docs/multi-rank.md).
        spinner.waits("fact: cudarc CudaContext::new + first new_stream", || {
            drop(CudaContext::new(0).unwrap().new_stream().unwrap())
        });
        spinner.waits("fact: one-rank ncclCommInitRank + finalize + destroy", || {
            let other = Communicator::init_rank(0, 1, 0, &UniqueId::new().unwrap(), &Config::new()).unwrap();
            other.finalize().unwrap().destroy().unwrap();
        });
    }
    assert!(must_not_wait.is_empty(), "these waited for the whole device: {must_not_wait:?}");
    comm.finalize().unwrap().destroy().unwrap();
}

/// Two ranks sharing the GPU set up together (init, a window, a device communicator) while a kernel of the same
/// context spins on most of the GPU: whether NCCL's setup calls wait for the whole device once there are peers. A
/// fact for docs/multi-rank.md; weft does not rely on the answer (it lines up the ranks of a process after each
/// such call instead). Needs NCCL ≥ 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1, and skips without.
#[test]
#[ignore = "needs a CUDA GPU"]
fn setup_with_a_peer_on_the_same_gpu_while_a_kernel_spins() {
    let version = weft::host::sys::library().unwrap().version();
    if !version.at_least(weft::host::placement::MULTI_RANK_GPU_NCCL) || !weft::host::placement::multi_rank_gpu_enabled()
    {
        println!("skipped: two ranks on one GPU need NCCL >= 2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL {version})");
        return;
    }
    let ctx = weft::host::cuda::context(0).unwrap();
    let mut spinner = Spinner::new(&ctx);
    spinner.grid = shapes(&ctx, &spinner)[1].1;
    let placement = weft::host::Placement::new(vec![0, 0]).unwrap();
    let id = UniqueId::new().unwrap();
    spinner.waits("fact, two ranks: init + window + dev_comm + drops", || {
        std::thread::scope(|scope| {
            for rank in 0..2 {
                let (placement, id) = (&placement, &id);
                scope.spawn(move || {
                    let config = weft::host::placement::shared_gpu_config(&Config::new(), 2);
                    let started = Instant::now();
                    let comm =
                        Communicator::uninit(0).unwrap().sharing_gpu(2).unwrap().init(2, rank, id, &config).unwrap();
                    let init = started.elapsed();
                    let s = comm.context().new_stream().unwrap();
                    let window = comm.alloc_window::<f32>(&s, 1 << 20, WindowFlags::COLL_SYMMETRIC).unwrap();
                    let registered = started.elapsed();
                    let dev: DevComm<'_, Lsa> =
                        comm.dev_comm(&weft::host::Requirements::new().lsa_barriers(8)).unwrap();
                    let created = started.elapsed();
                    drop((dev, window));
                    comm.finalize().unwrap().destroy().unwrap();
                    let _ = placement;
                    println!("  rank {rank}: init {init:.2?}, window {registered:.2?}, dev_comm {created:.2?}");
                });
            }
        })
    });
}

// SAFETY: the raw pointer is to page-locked memory the spinner owns for its whole life; the watchdog thread only
// stores through it with a volatile write (no driver call), which the kernel reads.
unsafe impl Sync for Spinner {}

/// How long the queue probe waits for a releasing kernel before it counts its stream as sharing the spinner's queue.
const QUEUE_GRACE: Duration = Duration::from_millis(500);

/// Streams the queue probe creates after the first: one more than CUDA's most queues (32), so a turn-taking
/// assignment wraps once.
const QUEUE_STREAMS: usize = 33;

/// Which streams of one CUDA context share a hardware queue (docs/multi-rank.md, "Hardware queues"). Ranks that are
/// threads of one process share a context, and CUDA feeds its streams to the GPU through `CUDA_DEVICE_MAX_CONNECTIONS`
/// queues; the stalls of 2026-12-04/05 fit streams of different ranks sharing one, and the counts fit streams taking
/// the queues in turn as they are created; neither is documented. For streams `first` and `other`: on `first` the
/// spinner, then a second spinner that waits for it in stream order; then on `other` a kernel that sets the word.
/// With a queue of its own, `other`'s kernel runs at once and releases both. In one shared queue it sits behind
/// `first`'s second kernel, which waits for the first: the word stays 0, and after [`QUEUE_GRACE`] the host sets it
/// itself, so nothing hangs.
///
/// The control: with `CUDA_DEVICE_MAX_CONNECTIONS=1` every pair shares the one queue, and the probe must see it for
/// every pair (else it cannot see sharing at all; `scripts/gpu-check.sh`'s `fresh30` part runs it so). With more
/// queues it is a measurement: it prints which of the streams created after `first` share its queue.
#[test]
#[ignore = "needs a CUDA GPU"]
fn which_streams_share_a_hardware_queue() {
    let (ctx, connections, spinner, raise) = queue_probe();
    let first = ctx.new_stream().unwrap();
    let others: Vec<Arc<CudaStream>> = (0..QUEUE_STREAMS).map(|_| ctx.new_stream().unwrap()).collect();
    let shared: Vec<usize> = others
        .iter()
        .enumerate()
        .filter(|(_, other)| shares_a_queue(&spinner, &raise, &first, other))
        .map(|(i, _)| i + 1)
        .collect();
    println!(
        "CUDA_DEVICE_MAX_CONNECTIONS={connections}: of the {QUEUE_STREAMS} streams created after a stream, these share \
         its hardware queue (1 = the next one created): {shared:?}"
    );
    if connections == "1" {
        // The control: one queue for everything, so the probe must see every pair share it.
        assert_eq!(shared.len(), QUEUE_STREAMS, "the probe missed sharing in the one queue: it cannot see sharing");
    }
}

/// What both queue probes start from: GPU 0's context, `CUDA_DEVICE_MAX_CONNECTIONS` as set, the spinner and the
/// releasing kernel.
fn queue_probe() -> (Arc<CudaContext>, String, Spinner, cudarc::driver::CudaFunction) {
    let ctx = CudaContext::new(0).unwrap();
    let connections = std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").unwrap_or_else(|_| "unset (8)".into());
    let spinner = Spinner::new(&ctx);
    let raise = jit::function(&ctx, &RAISE).unwrap();
    (ctx, connections, spinner, raise)
}

/// Whether a kernel on `other` gets stuck behind `first`'s waiting kernel: see [`which_streams_share_a_hardware_queue`].
fn shares_a_queue(
    spinner: &Spinner,
    raise: &cudarc::driver::CudaFunction,
    first: &CudaStream,
    other: &CudaStream,
) -> bool {
    spinner.set(0);
    spinner.launch(&spinner.function, first, 1);
    // Waits for the first in stream order: it holds the queue's head until the word is set.
    spinner.launch(&spinner.function, first, 1);
    spinner.launch(raise, other, 1);
    let started = Instant::now();
    let mut stuck = true;
    while started.elapsed() < QUEUE_GRACE {
        if spinner.get() != 0 {
            stuck = false;
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Releases both spinners (and `other`'s kernel, which then sets the word again).
    spinner.set(1);
    first.synchronize().unwrap();
    other.synchronize().unwrap();
    stuck
}

/// What moves the next stream's hardware queue along, if streams take the queues in turn: for a stream `first`,
/// then `between` (which may create streams of its own, or drop them), then [`QUEUE_STREAMS`] new streams, the
/// first of those that shares `first`'s queue (1 = the first created after `between`), or `None`; and what
/// `between` returned, kept alive until the streams are measured.
fn first_sharing_after<R>(
    ctx: &Arc<CudaContext>,
    spinner: &Spinner,
    raise: &cudarc::driver::CudaFunction,
    between: impl FnOnce() -> R,
) -> (Option<usize>, R) {
    let first = ctx.new_stream().unwrap();
    let kept = between();
    let later: Vec<Arc<CudaStream>> = (0..QUEUE_STREAMS).map(|_| ctx.new_stream().unwrap()).collect();
    let found = later.iter().position(|other| shares_a_queue(spinner, raise, &first, other)).map(|i| i + 1);
    (found, kept)
}

/// Whether streams created and then destroyed, and the streams NCCL creates for a communicator, move the turn of
/// the hardware queues on (docs/multi-rank.md, "Hardware queues": the stall left at 4 ranks came after many
/// communicator resources had been made and freed). If CUDA hands the queues out in turn, with `P` the first later
/// stream that shares a stream's queue when nothing happens between, a step that makes `P − j` streams moves that to
/// `j`: so each line prints how many streams the step seems to have created. One rank, NCCL's communicator on this
/// context: its init, a window and a device communicator, then its first collectives. Printed as facts; the control
/// is that with `CUDA_DEVICE_MAX_CONNECTIONS=1` every step finds sharing at 1.
#[test]
#[ignore = "needs a CUDA GPU"]
fn what_moves_a_new_stream_to_another_hardware_queue() {
    let (ctx, connections, spinner, raise) = queue_probe();
    let (period, ()) = first_sharing_after(&ctx, &spinner, &raise, || ());
    let mut found = vec![("nothing", period)];
    let (dropped, ()) = first_sharing_after(&ctx, &spinner, &raise, || {
        for _ in 0..7 {
            drop(ctx.new_stream().unwrap());
        }
    });
    found.push(("7 streams created and destroyed", dropped));
    let (init, comm) = first_sharing_after(&ctx, &spinner, &raise, || {
        Communicator::init_rank(0, 1, 0, &UniqueId::new().unwrap(), &Config::new()).unwrap()
    });
    found.push(("ncclCommInitRank", init));
    let s = comm.context().new_stream().unwrap();
    let (resources, (window, dev)) = first_sharing_after(&ctx, &spinner, &raise, || {
        let window = comm.alloc_window::<f32>(&s, 1 << 20, WindowFlags::COLL_SYMMETRIC).unwrap();
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&weft::host::Requirements::new().lsa_barriers(8)).unwrap();
        (window, dev)
    });
    found.push(("a window and a device communicator", resources));
    let (collectives, ()) = first_sharing_after(&ctx, &spinner, &raise, || {
        let (a, mut b) =
            (DeviceBuffer::<f32>::new(&s, 1 << 16).unwrap(), DeviceBuffer::<f32>::new(&s, 1 << 16).unwrap());
        comm.all_reduce(&a, &mut b, weft::host::ReduceOp::Sum, &s).unwrap();
        comm.reduce_scatter(&a, &mut b, weft::host::ReduceOp::Sum, &s).unwrap();
        comm.all_gather(&a, &mut b, &s).unwrap();
        s.synchronize().unwrap();
    });
    found.push(("the first all-reduce, reduce-scatter and all-gather", collectives));
    println!("CUDA_DEVICE_MAX_CONNECTIONS={connections}: the first of {QUEUE_STREAMS} later streams sharing a stream's queue");
    for (step, at) in &found {
        let moved = match (period, at) {
            (Some(p), Some(j)) => format!("; the step moved the turn on by {} streams", p as i64 - *j as i64),
            _ => String::new(),
        };
        println!("  after {step}: {at:?}{moved}");
    }
    drop((dev, window));
    comm.finalize().unwrap().destroy().unwrap();
    if connections == "1" {
        assert!(found.iter().all(|(_, at)| *at == Some(1)), "the probe missed sharing in the one queue: {found:?}");
    }
}

/// The device's free memory, in bytes.
fn free_bytes(ctx: &Arc<CudaContext>) -> usize {
    ctx.bind_to_thread().unwrap();
    cudarc::driver::result::mem_get_info().unwrap().0
}

/// A free after a wait gave up does not wait again: once `settle_within` on a stream ended in `Stalled` with a kernel
/// on it still spinning, dropping a buffer of that stream returns at once and leaks the memory (never frees it under
/// the spinning work) instead of waiting weft's five minutes once more. Once the kernel has finished, a buffer of
/// the same stream is freed as usual. (A process whose device stopped would otherwise take minutes per resource to
/// drop its resources: the fused benchmark's `zero_adam` stop at 8 ranks, docs/multi-rank.md.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_free_after_a_wait_gave_up_does_not_wait_again() {
    const BYTES: usize = 64 << 20;
    /// Allocation granularity and the driver's own bookkeeping: what free memory may move by besides the buffer.
    const SLACK: usize = 8 << 20;
    let ctx = weft::host::cuda::context(0).unwrap();
    let spinner = Spinner::new(&ctx);
    let stream = &spinner.stream;
    let before = free_bytes(&ctx);
    let stuck = DeviceBuffer::<u8>::new(stream, BYTES).unwrap();
    spinner.set(0);
    spinner.launch(&spinner.function, stream, 1);
    let gave_up = weft::host::cuda::settle_within(stream, Duration::from_millis(200));
    assert!(matches!(gave_up, Err(weft::host::Error::Stalled { .. })), "the spinner ended early: {gave_up:?}");
    let done = AtomicBool::new(false);
    let took = std::thread::scope(|scope| {
        // Whatever the drop does, the spinner is released after ten seconds, so the test never hangs.
        scope.spawn(|| {
            let started = Instant::now();
            while !done.load(Ordering::Acquire) && started.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(5));
            }
            spinner.set(1);
        });
        let started = Instant::now();
        drop(stuck);
        let took = started.elapsed();
        // Still spinning: the buffer's memory must still be allocated (leaked, not freed under the kernel).
        let leaked = before.saturating_sub(free_bytes(&ctx));
        done.store(true, Ordering::Release);
        assert!(leaked + SLACK >= BYTES, "the buffer was freed under a running kernel ({leaked} bytes still in use)");
        took
    });
    assert!(took < GRACE, "dropping a buffer whose stream a wait gave up on waited {took:.2?}, as if waiting again");
    weft::host::cuda::settle_within(stream, Duration::from_secs(10)).unwrap();
    // The kernel is done: a buffer of the stream is freed again.
    let after_leak = free_bytes(&ctx);
    let freed = DeviceBuffer::<u8>::new(stream, BYTES).unwrap();
    assert!(after_leak.saturating_sub(free_bytes(&ctx)) + SLACK >= BYTES, "the allocation took no memory");
    drop(freed);
    let back = free_bytes(&ctx);
    assert!(back + SLACK >= after_leak, "a buffer dropped after its stream finished was not freed");
    println!("drop after a wait gave up: {took:.2?}; {} MB leaked, then a buffer freed", BYTES >> 20);
}
