//! The GPU side of the benchmark: what a case provides (`Case`, `Instance`), how a result is checked against
//! the f64 host reference, and how both sides are timed.
//!
//! Timing: each side runs in batches queued behind a short spin kernel, with a pair of CUDA events around every
//! run. The spin keeps the GPU busy while the host enqueues the whole batch, so the events measure the GPU's
//! time for a run (kernels and the gaps between the kernels of one run) and not the host's launch latency,
//! which a training step hides behind earlier work too. The two sides alternate batch by batch so that clock
//! or thermal drift cannot favour one of them; every number reported is the median over all runs.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags};
use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, CudaStream};
use weft::host::jit;
use weft::host::{Active, Communicator, DeviceBuffer, Error, LaunchConfig, RegisteredMut};

use crate::options::{Dtype, Options};
use crate::report::Row;
use crate::spin::{spin, SPIN};
use crate::stats::{relative_error, Rng, Summary};

/// The bench's result type: weft-host's error, which `weft::host::spmd` needs from every rank.
pub type Result<T> = std::result::Result<T, Error>;

/// An error of the benchmark itself (not of CUDA or NCCL).
pub fn bench_error(problem: impl Into<String>) -> Error {
    Error::InvalidArgument { argument: "benchmark", problem: problem.into() }
}

/// At most this many input sets rotate (see [`crate::stats::rotation_sets`]).
const MAX_INPUT_SETS: usize = 8;
/// Runs per batch behind one spin kernel (one pair of events each).
const BATCH: usize = 25;
/// The first spin, before any enqueue time was measured, and the cap on later ones.
const FIRST_SPIN_NS: u64 = 200_000;
const MAX_SPIN_NS: u64 = 50_000_000;
/// Used when the driver does not report an L2 size: the H200's.
const FALLBACK_L2_BYTES: u64 = 60 << 20;
/// How long a rank waits for one check run or one timed batch before it gives up (a batch of 25 runs at the largest
/// size takes well under a second; weft's own limit, `weft::host::cuda::SETTLE_TIMEOUT`, is five minutes).
/// `WEFT_BENCH_SETTLE_S` replaces it ([`Options::settle`]; gpu-check's part `stall` shortens it, as a stopped run
/// only waits).
const SETTLE: Duration = Duration::from_secs(60);

/// The limit [`settle`] waits within: [`SETTLE`] unless [`set_settle_limit`] said otherwise.
static SETTLE_LIMIT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

/// Sets the limit of every later [`settle`] (`WEFT_BENCH_SETTLE_S`, read into [`Options::settle`]); once, before the
/// ranks start.
pub fn set_settle_limit(limit: Option<Duration>) {
    if let Some(limit) = limit {
        let _ = SETTLE_LIMIT.set(limit);
    }
}

fn settle_limit() -> Duration {
    SETTLE_LIMIT.get().copied().unwrap_or(SETTLE)
}

/// Waits for `stream` within [`SETTLE`]; a wait that passes it first says on stderr which work of which rank it was
/// (`what`: "rank 3 zero_adam F32 4194304: the Unfused side's check run") before the [`Error::Stalled`] ends the
/// rank, and with it (`run_rank`'s broken barrier) its peers: a benchmark whose device stopped making progress ends
/// with the place it stopped, not at an outer timeout.
fn settle(stream: &CudaStream, what: &dyn Fn() -> String) -> Result<()> {
    let limit = settle_limit();
    weft::host::cuda::settle_within(stream, limit).inspect_err(|error| {
        if matches!(error, Error::Stalled { .. }) {
            eprintln!(
                "fused bench: {}: not done after {} s, with every launch of it enqueued (docs/multi-rank.md, \
                 \"Hardware queues\")",
                what(),
                limit.as_secs()
            );
        }
    })
}

/// An element type the cases are instantiated for: what weft kernels, NCCL and the host reference all need.
///
/// The host conversions have their own names: `weft::device::Float`'s `from_f32` / `to_f32` exist only inside
/// kernels and panic on the host.
pub trait BenchFloat:
    weft::device::Float
    + weft::device::Element
    + weft::host::Element
    + cudarc::driver::ValidAsZeroBits
    + weft_kit::lamport::LamportElement
    + weft_kit::kernels::KitElement
{
    /// The matching runtime tag.
    const DTYPE: Dtype;
    /// `value` rounded to this type, on the host.
    fn round_from(value: f32) -> Self;
    /// The exact value, widened, on the host.
    fn widen(self) -> f64;
}

impl BenchFloat for f32 {
    const DTYPE: Dtype = Dtype::F32;
    fn round_from(value: f32) -> Self {
        value
    }
    fn widen(self) -> f64 {
        f64::from(self)
    }
}

impl BenchFloat for half::bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
    fn round_from(value: f32) -> Self {
        half::bf16::from_f32(value)
    }
    fn widen(self) -> f64 {
        f64::from(half::bf16::to_f32(self))
    }
}

/// `len` fresh values in [-1, 1) from stream `seed`, rounded to `T`.
pub fn random_values<T: BenchFloat>(seed: u64, len: usize) -> Vec<T> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| T::round_from(rng.signed_unit())).collect()
}

/// Widens device values for comparison with the f64 reference.
pub fn widen<T: BenchFloat>(values: &[T]) -> Vec<f64> {
    values.iter().map(|&v| v.widen()).collect()
}

/// Overwrites `buffer` with NaN, so an element the kernel does not write fails the check.
pub fn poison<T: BenchFloat>(buffer: &mut DeviceBuffer<T>) -> Result<()> {
    buffer.copy_from_host(&vec![T::round_from(f32::NAN); buffer.len()])
}

/// [`poison`] for a window's elements (`window.buffer_mut()`).
pub fn poison_window<T: BenchFloat>(mut part: RegisteredMut<'_, T>) -> Result<()> {
    part.copy_from_host(&vec![T::round_from(f32::NAN); part.len()])
}

/// One rank's view while it benchmarks: its communicator and the stream every case runs on.
#[derive(Debug)]
pub struct Rank<'comm> {
    /// This rank's communicator (one per GPU).
    pub comm: &'comm Communicator<Active>,
    /// The stream both sides of every case run on.
    pub stream: Arc<CudaStream>,
}

/// A fused weft kernel and its unfused baseline: what they compute and how much memory traffic the fused one
/// cannot avoid.
pub trait Case: Sync {
    /// Short name, used by `WEFT_BENCH_CASES` and in the table (`allreduce`).
    fn name(&self) -> &'static str;
    /// What the fused side runs.
    fn fused(&self) -> &'static str;
    /// What the unfused side runs.
    fn baseline(&self) -> &'static str;
    /// The element types both sides exist for.
    fn dtypes(&self) -> &'static [Dtype] {
        &Dtype::ALL
    }
    /// The fewest bytes of device memory one rank must move for one fused run at `bytes` per rank: each input
    /// read once, each output written once, plus what the peers read from this rank's memory.
    fn bytes_moved(&self, dtype: Dtype, bytes: usize, nranks: usize) -> u64;
    /// The largest relative error that passes.
    fn tolerance(&self, dtype: Dtype) -> f64 {
        dtype.default_tolerance()
    }
    /// nccl-tests' bus-bandwidth factor for this case on `nranks` ranks, where the case is a collective that
    /// bus bandwidth describes (all-reduce: `2(n − 1)/n`); `None` otherwise.
    fn bus_factor(&self, nranks: usize) -> Option<f64> {
        let _ = nranks;
        None
    }
    /// The hand-written CUDA C++ the baseline launches, as `(name, source)`: compiled for sm_90 on machines
    /// without a GPU too, so a broken baseline shows before the GPU run.
    fn cuda_sources(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// Whether both sides can be recorded into a CUDA graph ([`Instance::record`]; `WEFT_BENCH_GRAPH=1` measures
    /// only such cases). `None`: yes; `Some(why)`: no, and why.
    fn not_capturable(&self) -> Option<&'static str> {
        Some("its instances do not record themselves into a graph yet")
    }
    /// Allocates `sets` independent input/output sets for messages of `bytes` per rank and compiles or loads
    /// both sides' kernels. Collective: every rank calls it with the same arguments.
    fn setup<'comm>(
        &self,
        rank: &Rank<'comm>,
        dtype: Dtype,
        bytes: usize,
        sets: usize,
    ) -> Result<Box<dyn Instance + 'comm>>;
}

/// A case set up at one element type and size.
///
/// Inputs are drawn from a `draw` number shared by all ranks: rank `r`'s inputs for a draw are a function of
/// `(draw, r)` ([`crate::stats::seed`]), so [`reference`](Instance::reference) can regenerate every rank's
/// inputs without communicating.
pub trait Instance {
    /// Fills set `set`'s inputs (and any state the kernels update in place) with fresh values of `draw`.
    fn fill(&mut self, set: usize, draw: u64) -> Result<()>;
    /// Overwrites set `set`'s outputs with NaN.
    fn poison(&mut self, set: usize) -> Result<()>;
    /// Enqueues one fused run on set `set` (no synchronization).
    fn run_fused(&mut self, set: usize) -> Result<()>;
    /// Enqueues one unfused run on set `set`: the NCCL collective(s), then the epilogue kernel.
    fn run_unfused(&mut self, set: usize) -> Result<()>;
    /// Copies set `set`'s outputs to the host (after the stream is synchronized), one vector per output.
    fn outputs(&mut self, set: usize) -> Result<Vec<Vec<f64>>>;
    /// This rank's expected outputs for inputs of `draw`, computed on the host in f64, one vector per output.
    fn reference(&self, draw: u64) -> Vec<Vec<f64>>;
    /// Records one run of `side` on set `set` into a CUDA graph being captured, borrowing what it touches for the
    /// graph's life (cases whose [`Case::not_capturable`] is `None` implement it).
    fn record<'g>(&'g self, side: Side, set: usize, capture: &mut weft::host::Capture<'g>) -> Result<()> {
        let _ = (side, set, capture);
        Err(bench_error("this case does not record itself into a CUDA graph"))
    }
    /// With `WEFT_TRACE` set, cases that mark the steps of their last unfused run (an event after each) say which
    /// are done: printed when a check run stops, to tell which step the device stopped at.
    fn progress(&self) -> Option<String> {
        None
    }
}

/// Which side of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The fused weft kernel.
    Fused = 0,
    /// NCCL + the separate epilogue kernel.
    Unfused = 1,
}

impl Side {
    /// Both sides, in table order.
    pub const BOTH: [Side; 2] = [Side::Fused, Side::Unfused];

    fn run(self, instance: &mut dyn Instance, set: usize) -> Result<()> {
        match self {
            Side::Fused => instance.run_fused(set),
            Side::Unfused => instance.run_unfused(set),
        }
    }
}

/// What the ranks of a run wait at between measurements, passing the largest of a value: a [`ThreadBarrier`] for
/// ranks that are threads of this process, a [`CollectiveBarrier`] for one rank per process (under a launcher).
pub trait Rendezvous {
    /// Waits until every rank arrived; returns the largest `value` any of them passed. Fails if a rank failed.
    fn wait_max(&self, value: u64) -> Result<u64>;

    /// Waits until every rank arrived.
    fn wait(&self) -> Result<()> {
        self.wait_max(0).map(drop)
    }

    /// Between two launches of a timed batch: waits until every rank sharing this rank's CUDA context (the rank threads
    /// of one process) has enqueued its launch too. Ranks whose streams share one of CUDA's hardware queues would
    /// otherwise deadlock there: a rank's next launch, queued ahead of a peer's current one, waits for its own
    /// current one, which waits at a barrier for the peer's (docs/multi-rank.md, "Hardware queues"). A batch of ten
    /// fused launches stopped so at 8 ranks on one H100 (2026-12-06). Nothing to do for one rank per process.
    fn line_up_launches(&self) -> Result<()> {
        Ok(())
    }

    /// Releases every waiter with an error, now and from now on (threads; a process that fails leaves, and its
    /// peers' next barrier ends in an error when [`COLLECTIVE_BARRIER_TIMEOUT`] passes).
    fn break_all(&self) {}
}

impl CollectiveBarrier<'_> {
    /// A barrier over `comm`, for one rank per process.
    pub fn new(comm: &Communicator<Active>) -> Result<CollectiveBarrier<'_>> {
        let stream = comm.context().new_stream()?;
        let words = Mutex::new((stream.alloc_zeros::<u64>(1)?, stream.alloc_zeros::<u64>(1)?));
        Ok(CollectiveBarrier { comm, stream, words })
    }
}

/// How long a rank waits at a [`CollectiveBarrier`] for the others: they arrive between two measurements, seconds
/// apart at most.
pub const COLLECTIVE_BARRIER_TIMEOUT: Duration = Duration::from_secs(300);

/// The barrier of one rank per process: an all-reduce (max) of one word on the run's communicator.
pub struct CollectiveBarrier<'a> {
    comm: &'a Communicator<Active>,
    stream: Arc<CudaStream>,
    words: Mutex<(CudaSlice<u64>, CudaSlice<u64>)>,
}

impl Rendezvous for CollectiveBarrier<'_> {
    fn wait_max(&self, value: u64) -> Result<u64> {
        let mut words = self.words.lock().unwrap_or_else(PoisonError::into_inner);
        let (send, recv) = &mut *words;
        self.stream.memcpy_htod(&[value], send)?;
        self.comm.all_reduce(&*send, recv, weft::host::ReduceOp::Max, &self.stream)?;
        self.comm.wait(&self.stream, COLLECTIVE_BARRIER_TIMEOUT)?;
        Ok(weft::host::cuda::download(&self.stream, &*recv)?[0])
    }
}

/// A barrier for the rank threads of one process that also agrees on a number (the largest any rank
/// offers), and that a failing rank can break so the others stop waiting for it.
#[derive(Debug)]
pub struct ThreadBarrier {
    ranks: usize,
    state: Mutex<BarrierState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct BarrierState {
    arrived: usize,
    generation: u64,
    pending_max: u64,
    released_max: u64,
    broken: bool,
}

impl ThreadBarrier {
    /// A barrier for `ranks` threads.
    pub fn new(ranks: usize) -> ThreadBarrier {
        ThreadBarrier { ranks, state: Mutex::new(BarrierState::default()), changed: Condvar::new() }
    }
}

impl Rendezvous for ThreadBarrier {
    fn line_up_launches(&self) -> Result<()> {
        if self.ranks > 1 {
            self.wait()?;
        }
        Ok(())
    }

    /// Fails if a rank broke the barrier (it failed and will not arrive).
    fn wait_max(&self, value: u64) -> Result<u64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.broken {
            return Err(bench_error("another rank failed; this one stops too"));
        }
        state.pending_max = state.pending_max.max(value);
        state.arrived += 1;
        if state.arrived == self.ranks {
            state.released_max = std::mem::take(&mut state.pending_max);
            state.arrived = 0;
            state.generation += 1;
            self.changed.notify_all();
            return Ok(state.released_max);
        }
        let generation = state.generation;
        while state.generation == generation && !state.broken {
            state = self.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        if state.generation == generation {
            return Err(bench_error("another rank failed; this one stops too"));
        }
        Ok(state.released_max)
    }

    fn break_all(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).broken = true;
        self.changed.notify_all();
    }
}

/// Runs both sides on set 0 with fresh inputs of `draw` and returns their relative errors (the worst over the
/// outputs) against the host reference, `[fused, unfused]`. Inputs are refilled and outputs poisoned before each
/// side, the fused side first.
pub fn check(
    instance: &mut dyn Instance,
    stream: &CudaStream,
    barrier: &dyn Rendezvous,
    draw: u64,
    label: &str,
) -> Result<[f64; 2]> {
    let reference = instance.reference(draw);
    let mut errors = [f64::INFINITY; 2];
    for side in Side::BOTH {
        let error = &mut errors[side as usize];
        instance.fill(0, draw)?;
        instance.poison(0)?;
        // Every rank's inputs are in place before any rank's kernel reads its peers'.
        barrier.wait()?;
        side.run(instance, 0)?;
        settle(stream, &|| format!("{label}: the {side:?} side's check run")).inspect_err(|_| {
            if let Some(progress) = instance.progress() {
                eprintln!("fused bench: {label}: the last unfused run's steps: {progress}");
            }
        })?;
        let outputs = instance.outputs(0)?;
        *error = if outputs.len() == reference.len() {
            outputs.iter().zip(&reference).map(|(got, want)| relative_error(got, want)).fold(0.0, f64::max)
        } else {
            f64::INFINITY
        };
        // No rank refills while a peer may still read its inputs.
        barrier.wait()?;
    }
    Ok(errors)
}

/// Times runs on one stream: a spin kernel, then a batch of runs with an event pair around each.
pub struct Timer {
    stream: Arc<CudaStream>,
    spin: CudaFunction,
    events: Vec<(CudaEvent, CudaEvent)>,
    /// The next spin of each side (fused, unfused): twice that side's last enqueue time, at least
    /// `FIRST_SPIN_NS`. Per side, because the unfused side enqueues more launches per run.
    spin_ns: [u64; 2],
    /// With `WEFT_TRACE` set: each batch is printed (with `label`) before the rank waits for it, so a run that stops
    /// shows every rank's last batch.
    trace: bool,
    /// What this rank is measuring ("rank 2 zero_adam Bf16 16777216"): for the trace, and for the message of a batch
    /// that never finishes.
    label: String,
}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer").field("spin_ns", &self.spin_ns).field("events", &self.events.len()).finish()
    }
}

impl Timer {
    /// Loads the spin kernel and creates the timing events (`CU_EVENT_DEFAULT`: cudarc's default flags
    /// disable timing).
    pub fn new(stream: &Arc<CudaStream>) -> Result<Timer> {
        let context = stream.context();
        let spin = jit::function(context, &SPIN)?;
        let events = (0..BATCH)
            .map(|_| {
                Ok((
                    context.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
                    context.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Timer {
            stream: stream.clone(),
            spin,
            events,
            spin_ns: [FIRST_SPIN_NS; 2],
            trace: false,
            label: String::new(),
        })
    }

    /// Runs `side` `count` (≤ BATCH) times, the `k`-th on set `(first + k) % sets`, and returns the GPU time
    /// of each run in µs. Every rank calls it together (the spin length is agreed on through `barrier`).
    fn batch(
        &mut self,
        run: &mut dyn FnMut(Side, usize) -> Result<()>,
        side: Side,
        count: usize,
        first: usize,
        sets: usize,
        barrier: &dyn Rendezvous,
    ) -> Result<Vec<f64>> {
        let count = count.min(self.events.len());
        let slot = side as usize;
        let spin_ns = barrier.wait_max(self.spin_ns[slot])?;
        spin(&self.spin, &self.stream, spin_ns)?;
        let enqueue_started = Instant::now();
        for (k, (start, end)) in self.events.iter().take(count).enumerate() {
            if k > 0 {
                barrier.line_up_launches()?;
            }
            start.record(&self.stream)?;
            run(side, (first + k) % sets.max(1))?;
            end.record(&self.stream)?;
        }
        let enqueue_ns = u64::try_from(enqueue_started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // The next batch of this side spins comfortably longer than this one took to enqueue, so the GPU does not
        // catch up with the host and wait for launches. A slow enqueue (a collective's first call sets up its
        // connections) lengthens only the next spin, and that first batch is a discarded warm-up anyway.
        self.spin_ns[slot] = enqueue_ns.saturating_mul(2).clamp(FIRST_SPIN_NS, MAX_SPIN_NS);
        let label = &self.label;
        if self.trace {
            eprintln!(
                "weft trace: {label}: {side:?} runs {first}..{} enqueued after a {spin_ns} ns spin",
                first + count
            );
        }
        settle(&self.stream, &|| {
            format!("{label}: a timed batch of the {side:?} side, runs {first}..{}", first + count)
        })?;
        self.events.iter().take(count).map(|(start, end)| Ok(f64::from(start.elapsed_ms(end)?) * 1e3)).collect()
    }

    /// Warms both sides up (`warmup` runs each, discarded), then times `iterations` runs of each, alternating
    /// batch by batch and rotating through `sets` input sets. Returns (fused, unfused) µs per run.
    pub fn time_both(
        &mut self,
        instance: &mut dyn Instance,
        sets: usize,
        warmup: usize,
        iterations: usize,
        barrier: &dyn Rendezvous,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        self.time_runs(&mut |side, set| side.run(instance, set), sets, warmup, iterations, barrier)
    }

    /// [`time_both`](Self::time_both) with each side of each set captured once into a CUDA graph
    /// ([`Instance::record`]) and replayed: the launch cost a graph saves is what differs. Every rank captures the
    /// same graphs in the same order (NCCL's collectives inside are collective at replay, not at capture).
    pub fn time_both_graphs(
        &mut self,
        instance: &dyn Instance,
        sets: usize,
        warmup: usize,
        iterations: usize,
        barrier: &dyn Rendezvous,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let mut graphs = Vec::with_capacity(sets.max(1));
        for set in 0..sets.max(1) {
            let mut pair = Vec::with_capacity(2);
            for side in Side::BOTH {
                let graph = weft::host::Graph::capture(&self.stream, |c| instance.record(side, set, c))?;
                graph.upload()?;
                pair.push(graph);
            }
            graphs.push(pair);
        }
        let timed =
            self.time_runs(&mut |side, set| graphs[set][side as usize].replay(), sets, warmup, iterations, barrier);
        // The graphs' drops wait for their last replays (polling) before the instance's buffers can go.
        drop(graphs);
        timed
    }

    fn time_runs(
        &mut self,
        run: &mut dyn FnMut(Side, usize) -> Result<()>,
        sets: usize,
        warmup: usize,
        iterations: usize,
        barrier: &dyn Rendezvous,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        for side in Side::BOTH {
            let mut done = 0;
            while done < warmup {
                let count = (warmup - done).min(BATCH);
                self.batch(run, side, count, done, sets, barrier)?;
                done += count;
            }
        }
        let (mut fused, mut unfused) = (Vec::with_capacity(iterations), Vec::with_capacity(iterations));
        while fused.len() < iterations {
            let count = (iterations - fused.len()).min(BATCH);
            let first = fused.len();
            fused.extend(self.batch(run, Side::Fused, count, first, sets, barrier)?);
            unfused.extend(self.batch(run, Side::Unfused, count, first, sets, barrier)?);
        }
        Ok((fused, unfused))
    }
}

/// Everything one rank measures: every selected case at every selected element type and size, in that order
/// (the same on every rank, which the collectives inside require). `done` is called after each row.
pub fn run_rank(
    comm: &Communicator<Active>,
    options: &Options,
    cases: &[&dyn Case],
    barrier: &dyn Rendezvous,
    done: &(dyn Fn(usize, &Row) + Sync),
) -> Result<Vec<Row>> {
    let result = measure_all(comm, options, cases, barrier, done);
    if result.is_err() {
        barrier.break_all();
    }
    result
}

fn measure_all(
    comm: &Communicator<Active>,
    options: &Options,
    cases: &[&dyn Case],
    barrier: &dyn Rendezvous,
    done: &(dyn Fn(usize, &Row) + Sync),
) -> Result<Vec<Row>> {
    let stream = comm.context().new_stream()?;
    let rank = Rank { comm, stream: stream.clone() };
    let l2_bytes = match comm.context().attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE) {
        Ok(bytes) if bytes > 0 => bytes as u64,
        _ => FALLBACK_L2_BYTES,
    };
    let mut timer = Timer::new(&stream)?;
    timer.trace = std::env::var_os("WEFT_TRACE").is_some();
    let mut rows = Vec::new();
    let mut draw = 0u64;
    for case in cases {
        for &dtype in options.dtypes.iter().filter(|dtype| case.dtypes().contains(dtype)) {
            for &bytes in &options.sizes {
                let bytes_moved = case.bytes_moved(dtype, bytes, comm.nranks());
                let sets = crate::stats::rotation_sets(bytes_moved, l2_bytes, MAX_INPUT_SETS);
                let what = format!("rank {} {} {dtype:?} {bytes}", comm.rank(), case.name());
                if timer.trace {
                    eprintln!("weft trace: {what}: set-up and check");
                }
                let mut instance = case.setup(&rank, dtype, bytes, sets)?;
                draw += 1;
                let [weft_error, baseline_error] = check(instance.as_mut(), &stream, barrier, draw, &what)?;
                timer.label = what;
                // Set 0 keeps the checked inputs; the others get their own.
                for set in 1..sets {
                    instance.fill(set, draw.wrapping_add((set as u64) << 32))?;
                }
                let (warmup, iterations) = (options.warmup(), options.iterations(bytes));
                let (fused, unfused) = if options.graph {
                    timer.time_both_graphs(instance.as_ref(), sets, warmup, iterations, barrier)?
                } else {
                    timer.time_both(instance.as_mut(), sets, warmup, iterations, barrier)?
                };
                // Every rank's runs are done before any rank frees (a free or a deregistration may wait inside the
                // driver, and a peer still launching would then wait for it: docs/multi-rank.md).
                barrier.wait()?;
                drop(instance);
                let row = Row {
                    case: case.name().to_string(),
                    dtype,
                    bytes,
                    nranks: comm.nranks(),
                    weft: Summary::of(&fused),
                    baseline: Summary::of(&unfused),
                    bytes_moved,
                    input_sets: sets,
                    weft_error,
                    baseline_error,
                    tolerance: case.tolerance(dtype),
                    bus_factor: case.bus_factor(comm.nranks()),
                };
                done(comm.rank(), &row);
                rows.push(row);
            }
        }
    }
    settle(&stream, &|| format!("rank {}: the last runs", comm.rank()))?;
    Ok(rows)
}

/// A launch of at most one full wave of `block`-thread blocks for `function`, and no more blocks than `n` threads
/// fill (`n` work items, one per thread: elements or packs; kernels that run one block per row take
/// [`grid_for_rows`]); the wave is what a device communicator's barriers must be sized for, so it is returned too.
pub fn grid_for(
    comm: &Communicator<Active>,
    function: &CudaFunction,
    stream: &CudaStream,
    block: u32,
    n: usize,
) -> Result<(LaunchConfig, LaunchConfig)> {
    // This rank's share of its GPU: ranks sharing one each get theirs (`Communicator::one_wave`).
    let wave = comm.one_wave(function, stream, block)?;
    let needed = u32::try_from(n.div_ceil(block as usize)).unwrap_or(u32::MAX).max(1);
    Ok((LaunchConfig::linear(wave.grid_dim.0.min(needed), block), wave))
}

/// [`grid_for`] for kernels that run one `block`-thread block per row (blocks loop over the rows): no more blocks
/// than `rows`, at most one wave.
pub fn grid_for_rows(
    comm: &Communicator<Active>,
    function: &CudaFunction,
    stream: &CudaStream,
    block: u32,
    rows: usize,
) -> Result<(LaunchConfig, LaunchConfig)> {
    grid_for(comm, function, stream, block, rows.saturating_mul(block as usize))
}
