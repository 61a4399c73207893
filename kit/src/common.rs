//! What the numbered examples share: deterministic inputs, the relative-error check, CUDA-event timing, loading
//! the hand-written baselines of `benches/cuda/`, and the path taken on a machine without a GPU.
//!
//! The examples use it as `weft_kit::common`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream};
use weft::host::jit::{self, CompileRequest, GpuArch, KernelCache, Toolchain};
use weft::host::{Communicator, Config, Error, Job, LaunchConfig, Placement};

/// The examples' `main` result: any error, printed by the runtime, exits with status 1.
pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Element types the examples instantiate their kernels for (`f32`, `bf16`), with what the host needs of them.
///
/// `of` and `value` are the conversions the host-side checks use (to the stored type, and widened to f64); the
/// vocabulary's [`weft::device::Float`] methods work on the host too.
pub trait Real:
    weft::device::Float
    + weft::host::Element
    + cudarc::driver::ValidAsZeroBits
    + Default
    + std::fmt::Debug
    + crate::lamport::LamportElement
    + crate::kernels::KitElement
{
    /// Relative error a correct result stays under: float rounding of the output and of `f32` accumulation.
    const TOLERANCE: f64;
    /// `v` rounded to this type on the host.
    fn of(v: f32) -> Self;
    /// The exact value, widened.
    fn value(self) -> f64;
    /// A NaN, to poison outputs before a checked run.
    fn nan() -> Self;
}

impl Real for f32 {
    const TOLERANCE: f64 = 1e-5;
    fn of(v: f32) -> Self {
        v
    }
    fn value(self) -> f64 {
        f64::from(self)
    }
    fn nan() -> Self {
        f32::NAN
    }
}

impl Real for half::bf16 {
    const TOLERANCE: f64 = 1e-2;
    fn of(v: f32) -> Self {
        half::bf16::from_f32(v)
    }
    fn value(self) -> f64 {
        f64::from(self.to_f32())
    }
    fn nan() -> Self {
        half::bf16::NAN
    }
}

/// The type's entry-point suffix (`f32`, `bf16`).
pub fn type_name<T: Real>() -> &'static str {
    <T as weft::device::Element>::NAME
}

/// Deterministic pseudo-random values in [-1, 1) (xorshift), different for every seed: every rank can compute
/// every other rank's inputs for the host reference.
pub fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// [`random`] rounded to `T`.
pub fn random_as<T: Real>(len: usize, seed: u64) -> Vec<T> {
    random(len, seed).into_iter().map(T::of).collect()
}

/// ‖got − want‖ / ‖want‖ in f64. A NaN or infinity anywhere in `got` (a poisoned element never written, or a
/// wrong one) makes it infinite, so it never passes.
pub fn relative_error<T: Real>(got: &[T], want: &[f64]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        let g = g.value();
        if !g.is_finite() {
            return f64::INFINITY;
        }
        diff += (g - w) * (g - w);
        norm += w * w;
    }
    (diff / norm.max(f64::MIN_POSITIVE)).sqrt()
}

/// Whether a relative error passes for `T` (NaN never does).
pub fn passes<T: Real>(error: f64) -> bool {
    error < T::TOLERANCE
}

/// The largest of some relative errors, a NaN winning: a NaN must never look like a pass.
pub fn worst(errors: impl IntoIterator<Item = f64>) -> f64 {
    let mut worst = 0.0f64;
    for error in errors {
        if error.is_nan() {
            return f64::NAN;
        }
        worst = worst.max(error);
    }
    worst
}

/// Prints the verdict of an example's checks: `Ok` when `failed` is empty, else an error (exit status 1) after
/// listing what failed. `limits` says what passing means.
pub fn verdict(failed: &[String], limits: &str) -> Result<()> {
    if failed.is_empty() {
        println!("\ncheck against the host reference: passed ({limits})");
        return Ok(());
    }
    println!("\ncheck against the host reference: FAILED");
    for f in failed {
        println!("  {f}");
    }
    Err(format!("{} case(s) do not match the host reference", failed.len()).into())
}

/// The median of some timings.
pub fn median(mut times: Vec<f32>) -> f32 {
    times.sort_by(f32::total_cmp);
    times[times.len() / 2]
}

/// A number of bytes for humans.
pub fn bytes(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{} MB", n >> 20)
    } else {
        format!("{} KB", n >> 10)
    }
}

/// Times work on one stream with a pair of CUDA events (created with timing enabled: cudarc's default flags
/// disable it).
pub struct Stopwatch {
    start: CudaEvent,
    end: CudaEvent,
}

impl Stopwatch {
    /// Two timing events in `ctx`.
    pub fn new(ctx: &Arc<CudaContext>) -> std::result::Result<Stopwatch, Error> {
        Ok(Stopwatch {
            start: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
            end: ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
        })
    }

    /// Milliseconds the GPU spent on what `work` enqueues on `stream` (waits for it).
    pub fn time(
        &self,
        stream: &Arc<CudaStream>,
        work: impl FnOnce() -> std::result::Result<(), Error>,
    ) -> std::result::Result<f32, Error> {
        self.start.record(stream)?;
        work()?;
        self.end.record(stream)?;
        // `elapsed_ms` waits for the event inside the driver, holding a lock of the context that a peer rank
        // sharing the GPU may need to launch what this work waits for (docs/multi-rank.md, "Host copies"): poll
        // the stream first, with a deadline, so that a stuck round is `Error::Stalled`, not a hang.
        weft::host::cuda::settle_within(stream, ROUND_TIMEOUT)?;
        Ok(self.start.elapsed_ms(&self.end)?)
    }
}

/// How long one timed run may take before [`Stopwatch::time`] reports `Error::Stalled`.
pub const ROUND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Times `variants` alternatives on one stream: `warmup` untimed rounds, then `iterations` rounds; in each round
/// `run(v)` runs variant `v` once for every `v` in turn (so slow drifts of clock or temperature hit all alike).
/// Returns each variant's median in microseconds.
pub fn time_variants(
    stopwatch: &Stopwatch,
    stream: &Arc<CudaStream>,
    warmup: usize,
    iterations: usize,
    variants: usize,
    run: impl FnMut(usize) -> std::result::Result<(), Error>,
) -> std::result::Result<Vec<f64>, Error> {
    time_variants_with(stopwatch, stream, warmup, iterations, variants, run, |_| Ok(())).map_err(|f| (*f).report(None))
}

/// [`time_variants`] for variants that end in kernels which wait for nobody but may need a whole SM (cuBLAS's),
/// next to variants whose kernels wait for their peers: where ranks share a GPU, a rank that starts its next
/// variant's waiting kernel while a peer's last GEMM is still queued can fill every SM with blocks that wait for
/// that peer, and the GEMM they wait behind never finds room (a hang seen at 2 ranks in example 08). So after each
/// timed run, outside the timing, the ranks sharing a GPU line up (a one-element `ncclAllReduce`, whose few blocks
/// leave the GEMM room): nobody starts a variant before every rank has finished the previous one. With one rank per
/// GPU this is [`time_variants`].
pub fn time_variants_apart(
    comm: &Communicator,
    stopwatch: &Stopwatch,
    stream: &Arc<CudaStream>,
    warmup: usize,
    iterations: usize,
    variants: usize,
    run: impl FnMut(usize) -> std::result::Result<(), Error>,
) -> std::result::Result<Vec<f64>, Error> {
    if comm.ranks_on_gpu() <= 1 {
        return time_variants(stopwatch, stream, warmup, iterations, variants, run);
    }
    let token = stream.alloc_zeros::<f32>(1)?;
    let mut sum = stream.alloc_zeros::<f32>(1)?;
    let between = |stream: &Arc<CudaStream>| {
        comm.all_reduce(&token, &mut sum, weft::host::ReduceOp::Sum, stream)?;
        weft::host::cuda::settle_within(stream, ROUND_TIMEOUT)
    };
    time_variants_with(stopwatch, stream, warmup, iterations, variants, run, between)
        .map_err(|f| (*f).report(Some(comm.rank())))
}

/// A timed round that failed: which variant, in which round, at which step, and the error.
struct FailedRound {
    round: usize,
    variant: usize,
    step: &'static str,
    error: Error,
}

impl FailedRound {
    /// Says on stderr which run failed or stalled — the error cannot (a stalled round is the same `Error::Stalled`
    /// whichever variant it was), and a hang's diagnosis starts there — and returns the error.
    fn report(self, rank: Option<usize>) -> Error {
        let who = rank.map(|r| format!("rank {r}: ")).unwrap_or_default();
        eprintln!("{who}timed variant {} of round {} ({}): {}", self.variant, self.round, self.step, self.error);
        self.error
    }
}

fn time_variants_with(
    stopwatch: &Stopwatch,
    stream: &Arc<CudaStream>,
    warmup: usize,
    iterations: usize,
    variants: usize,
    mut run: impl FnMut(usize) -> std::result::Result<(), Error>,
    mut between: impl FnMut(&Arc<CudaStream>) -> std::result::Result<(), Error>,
) -> std::result::Result<Vec<f64>, Box<FailedRound>> {
    let mut samples = vec![Vec::with_capacity(iterations); variants];
    for round in 0..warmup + iterations {
        for (variant, times) in samples.iter_mut().enumerate() {
            let failed = |step| move |error| Box::new(FailedRound { round, variant, step, error });
            let ms = stopwatch.time(stream, || run(variant)).map_err(failed("its run"))?;
            between(stream).map_err(failed("the line-up after it"))?;
            if round >= warmup {
                times.push(ms);
            }
        }
    }
    Ok(samples.into_iter().map(|t| f64::from(median(t)) * 1e3).collect())
}

/// A hand-written CUDA C++ baseline (`benches/cuda/*.cu`), compiled by the same nvcc, flags and cache as weft's
/// kernels and loaded into one CUDA context.
pub struct Baseline {
    name: &'static str,
    module: Arc<CudaModule>,
}

impl Baseline {
    /// Compiles (or finds in the cache) and loads `source` into `ctx`.
    pub fn load(ctx: &Arc<CudaContext>, name: &'static str, source: &'static str) -> std::result::Result<Self, Error> {
        let toolchain = jit::toolchain()?;
        let arch = GpuArch::from_compute_capability(ctx.compute_capability()?);
        let compiled = jit::compile_cubin(toolchain, &CompileRequest::new(name, source, weft::device::WEFT_CUH, arch))?;
        Ok(Baseline { name, module: jit::load(ctx, &compiled)? })
    }

    /// One of its `extern "C"` kernels.
    pub fn function(&self, entry_point: &str) -> std::result::Result<CudaFunction, Error> {
        Ok(jit::load_function(&self.module, self.name, entry_point)?)
    }

    /// Its `{stem}_f32` and `{stem}_bf16` kernels, with one full wave of `block` threads for each (f32 first).
    /// Ranks sharing a GPU each get their part of it (`Communicator::one_wave`), as the fused kernels do.
    pub fn per_type(
        &self,
        comm: &Communicator,
        stem: &str,
        stream: &Arc<CudaStream>,
        block: u32,
    ) -> std::result::Result<([CudaFunction; 2], [LaunchConfig; 2]), Error> {
        let functions = [self.function(&format!("{stem}_f32"))?, self.function(&format!("{stem}_bf16"))?];
        let waves = [comm.one_wave(&functions[0], stream, block)?, comm.one_wave(&functions[1], stream, block)?];
        Ok((functions, waves))
    }
}

/// Refuses communicators whose ranks are not all in one LSA team (NVLink-connected GPUs of one host), for `user`
/// (what addresses every rank through LSA: "this example", a kernel's helper); returns the team's size otherwise.
pub fn require_one_lsa_team(comm: &weft::host::Communicator, user: &str) -> std::result::Result<usize, Error> {
    one_lsa_team(comm.properties()?.lsa_size, comm.nranks(), user)
}

/// [`require_one_lsa_team`]'s rule, from the LSA team's size and the communicator's.
fn one_lsa_team(lsa_size: usize, nranks: usize, user: &str) -> std::result::Result<usize, Error> {
    if lsa_size == nranks {
        return Ok(lsa_size);
    }
    Err(Error::MissingCapability {
        capability: "LSA",
        reason: format!(
            "{user} needs all {nranks} ranks in one LSA team (NVLink-connected GPUs), but the LSA team has {lsa_size}: \
             across nodes use NCCL's collectives"
        ),
    })
}

/// The launch of a kernel that opens `gemm_tiles` and waits for its peers, for an `m × n` product on `stream`'s GPU
/// (`gemm_tiles_config_shared`: the same grid on every rank), or `None` where the GPU runs no `gemm_tiles` loop (below
/// compute capability 8.0, or too little shared memory per block: the examples then leave that variant out). Other
/// errors are errors.
pub fn gemm_tiles_here(
    comm: &Communicator,
    stream: &CudaStream,
    m: usize,
    n: usize,
) -> std::result::Result<Option<LaunchConfig>, Error> {
    match weft::host::launch::gemm_tiles_config_shared(comm, stream, m, n) {
        Ok(cfg) => Ok(Some(cfg)),
        Err(Error::InvalidArgument { argument: "stream", .. }) => Ok(None),
        Err(other) => Err(other),
    }
}

/// Which `gemm_tiles` loop kernels for `context`'s GPU compile to, in words (for headers and test lines).
pub fn gemm_tiles_loop(context: &CudaContext) -> std::result::Result<&'static str, Error> {
    Ok(match gemm_mainloop(context)? {
        jit::GemmMainloop::Wgmma => "TMA + wgmma",
        jit::GemmMainloop::MmaSync => "cp.async + mma.sync",
    })
}

/// The GEMM mainloop kernels for `context`'s GPU compile to (`WEFT_GEMM_MAINLOOP`'s where the GPU has it): what the
/// tensor-parallel selectors' measured rules depend on (`select::Rules::from_env_on`).
pub fn gemm_mainloop(context: &CudaContext) -> std::result::Result<jit::GemmMainloop, Error> {
    Ok(jit::gemm_mainloop_on(context.compute_capability()?)?)
}

/// Where the ranks run: `WEFT_RANKS=n` ranks spread over the visible GPUs (several per GPU need NCCL ≥ 2.30 and
/// `NCCL_MULTI_RANK_GPU_ENABLE=1`), else one rank per GPU. Printed, so every run says what it measured.
pub fn placement() -> std::result::Result<Placement, Error> {
    let placement = Placement::from_env()?;
    println!("{}", placement.describe());
    Ok(placement)
}

/// The ranks this process runs: under a launcher (torchrun, srun, mpirun: `Job::from_env`), its one rank of the job;
/// otherwise every rank of the placement ([`placement`]) as threads. The same example binary runs both ways.
pub enum Ranks {
    /// One process per rank, started by a launcher.
    Launched(Job),
    /// Every rank in this process.
    Local(Placement),
}

impl Ranks {
    /// Reads the launcher's variables, else the placement; prints which.
    pub fn from_env() -> std::result::Result<Ranks, Error> {
        match Job::from_env()? {
            Some(job) => {
                println!("{job}: this process runs one rank");
                Ok(Ranks::Launched(job))
            }
            None => Ok(Ranks::Local(placement()?)),
        }
    }

    /// Ranks in the job.
    pub fn nranks(&self) -> usize {
        match self {
            Ranks::Launched(job) => job.world_size,
            Ranks::Local(placement) => placement.nranks(),
        }
    }

    /// The rank of the first result [`Ranks::run`] returns (the others follow in order).
    pub fn first_rank(&self) -> usize {
        match self {
            Ranks::Launched(job) => job.rank,
            Ranks::Local(_) => 0,
        }
    }

    /// Runs `body` on every rank this process runs, each with an active communicator, which is finalized and
    /// destroyed afterwards (aborted if `body` failed); the results in rank order.
    pub fn run<R: Send>(
        &self,
        config: &Config,
        body: impl Fn(&Communicator) -> std::result::Result<R, Error> + Sync,
    ) -> std::result::Result<Vec<R>, Error> {
        // Rank 0 says how the job is laid out: the LSA team (the ranks that reach each other's memory by load and
        // store: an NVLink domain, or one GPU's ranks), how many teams, and what GIN the network offers.
        let body = |comm: &Communicator| {
            if comm.rank() == 0 {
                println!("layout: {}", comm.properties()?);
            }
            body(comm)
        };
        match self {
            Ranks::Local(placement) => weft::host::spmd(placement.devices(), config, body),
            Ranks::Launched(job) => {
                let comm = Communicator::from_job(job, config)?;
                match body(&comm) {
                    Ok(value) => {
                        comm.finalize()?.destroy()?;
                        Ok(vec![value])
                    }
                    Err(error) => {
                        let _ = comm.abort();
                        Err(error)
                    }
                }
            }
        }
    }
}

/// The number of GPUs, or why there is none (no driver, or the driver sees no device).
pub fn gpus() -> std::result::Result<usize, String> {
    match weft::host::cuda::device_count() {
        Ok(0) => Err("the CUDA driver reports no GPU".into()),
        Ok(n) => Ok(n),
        Err(error) => Err(error.to_string()),
    }
}

/// A kernel module's generated `compile_check`.
pub type CompileCheck =
    fn(&Toolchain, &KernelCache, GpuArch) -> std::result::Result<jit::CompiledKernel, jit::JitError>;

/// No GPU: prove the toolchain by compiling the example's kernels and baselines for sm_90 against every NCCL
/// release's headers found, say what would have run, and succeed.
pub fn without_gpu(why: &str, kernels: &[CompileCheck], baselines: &[(&str, &str)], plan: &str) -> Result<()> {
    println!("No GPU here: {why}.");
    let (nvcc, includes) = header_sets()?;
    let cache_dir = std::env::temp_dir().join(format!("weft-example-{}", std::process::id()));
    let cache = KernelCache::new(&cache_dir);
    let outcome = (|| -> Result<()> {
        for include in &includes {
            let toolchain = Toolchain::from_paths(&nvcc, include, None)?;
            let report = |what: &str, started: Instant, compiled: &jit::CompiledKernel| {
                println!(
                    "  compiled {what} `{}` for sm_90 against NCCL {} headers: {} byte cubin in {:.1} s",
                    compiled.name,
                    toolchain.nccl_version,
                    compiled.cubin.len(),
                    started.elapsed().as_secs_f64()
                );
            };
            for check in kernels {
                let started = Instant::now();
                report("kernel", started, &check(&toolchain, &cache, GpuArch::SM_90)?);
            }
            for (name, source) in baselines {
                let started = Instant::now();
                let request = CompileRequest::new(name, source, weft::device::WEFT_CUH, GpuArch::SM_90);
                report("baseline", started, &cache.get_or_compile(&toolchain, &request)?);
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&cache_dir);
    outcome?;
    println!("\nOn a machine with NVIDIA GPUs this example {plan}");
    Ok(())
}

/// nvcc and the NCCL include directories to compile against: the environment's (`WEFT_NVCC`,
/// `WEFT_CODEGEN_NCCL_INCLUDES`), else the toolchain `cargo xtask` provisions — provisioned now if missing.
fn header_sets() -> Result<(PathBuf, Vec<PathBuf>)> {
    if let (Ok(nvcc), Ok(spec)) = (std::env::var("WEFT_NVCC"), std::env::var("WEFT_CODEGEN_NCCL_INCLUDES")) {
        let dirs = spec.split(';').filter_map(|e| e.split_once('=')).map(|(_, dir)| PathBuf::from(dir)).collect();
        return Ok((PathBuf::from(nvcc), dirs));
    }
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let toolchain = root.join("target/weft-toolchain");
    if !toolchain.join("stamp").is_file() {
        println!("Provisioning the CUDA/NCCL toolchain first (`cargo xtask provision`, once; pip downloads)...");
        let status = Command::new(env!("CARGO")).args(["xtask", "provision"]).current_dir(&root).status()?;
        if !status.success() {
            return Err("`cargo xtask provision` failed; run `cargo xtask doctor` for what is missing".into());
        }
    }
    let nvcc = std::fs::read_dir(toolchain.join("venv/lib"))?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("site-packages/nvidia/cu13/bin/nvcc"))
        .find(|p| p.is_file())
        .ok_or("the provisioned toolchain has no nvcc; run `cargo xtask doctor`")?;
    let includes = ["nccl-2.28.9", "nccl-2.32.3"]
        .iter()
        .map(|v| toolchain.join(v).join("nvidia/nccl/include"))
        .filter(|p| p.join("nccl.h").is_file())
        .collect();
    Ok((nvcc, includes))
}

#[cfg(test)]
mod lsa_team_tests {
    use super::*;

    #[test]
    fn a_communicator_spanning_several_lsa_teams_is_refused_naming_both_sizes() {
        assert_eq!(one_lsa_team(8, 8, "this example").unwrap(), 8);
        // Two nodes of 8 GPUs: the LSA team is one node.
        match one_lsa_team(8, 16, "this example") {
            Err(Error::MissingCapability { capability: "LSA", reason }) => {
                assert!(reason.contains("this example needs all 16 ranks"), "{reason}");
                assert!(reason.contains("the LSA team has 8"), "{reason}");
                assert!(reason.contains("NCCL's collectives"), "{reason}");
            }
            other => panic!("a communicator over two LSA teams was accepted: {other:?}"),
        }
    }
}
