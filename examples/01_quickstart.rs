//! weft's quickstart: on every visible GPU, a weft LSA all-reduce kernel checked against `ncclAllReduce` and a
//! host reference, with timings of both.
//!
//! ```sh
//! cargo run --release --example quickstart
//! ```
//!
//! On a machine without a GPU it fakes nothing: it generates the kernel's CUDA C++, compiles it with nvcc for
//! sm_90 against each NCCL release's headers it can find (proving the toolchain), says that no GPU was found and
//! what it would have run, and exits successfully.

#[path = "kernels/mod.rs"]
mod kernels;

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use kernels::allreduce::lsa_allreduce;
use weft::host::caps::Lsa;
use weft::host::jit::{CompileRequest, GpuArch, KernelCache, KernelSpec, Toolchain};
use weft::host::{Communicator, DevComm, ReduceOp, WindowFlags};
use weft::prelude::{Config, LaunchConfig};

const ELEMENTS: usize = 16 << 20; // 64 MB of f32 per rank
const MEGABYTES: usize = (ELEMENTS * 4) >> 20;
const ITERATIONS: usize = 20;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    println!("weft quickstart — one-shot LSA all-reduce written with #[weft::kernel]\n");
    match weft::host::cuda::device_count() {
        Ok(gpus) if gpus > 0 => run_on_gpus(gpus),
        Ok(_) => without_gpu("the CUDA driver reports no GPU"),
        Err(error) => without_gpu(&error.to_string()),
    }
}

/// Deterministic inputs for rank `rank`: every rank can compute every other rank's, for the host reference.
fn input(rank: usize, len: usize) -> Vec<f32> {
    let mut state = (rank as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn median(mut times: Vec<f32>) -> f32 {
    times.sort_by(f32::total_cmp);
    times[times.len() / 2]
}

struct RankReport {
    rank: usize,
    weft_ms: f32,
    nccl_ms: f32,
    weft_error: f64,
    nccl_error: f64,
}

fn run_on_gpus(gpus: usize) -> Result<()> {
    let devices: Vec<usize> = (0..gpus).collect();
    println!("{gpus} GPU(s): one rank per GPU, {} MB of f32 per rank", MEGABYTES);
    let reports = weft::host::spmd(&devices, &Config::new(), rank)?;
    let nranks = reports.len();
    println!("\nrank | weft kernel | ncclAllReduce | weft/nccl | rel. error weft | rel. error nccl");
    for r in &reports {
        println!(
            "{:4} | {:8.3} ms | {:10.3} ms | {:9.2} | {:15.2e} | {:15.2e}",
            r.rank,
            r.weft_ms,
            r.nccl_ms,
            r.weft_ms / r.nccl_ms,
            r.weft_error,
            r.nccl_error
        );
    }
    let bytes = (ELEMENTS * 4) as f64;
    let worst = reports.iter().map(|r| r.weft_ms).fold(0.0f32, f32::max);
    println!(
        "\n{nranks} rank(s): weft moves {:.1} GB/s per rank (reads {nranks} x {} MB, writes {} MB)",
        bytes * (nranks as f64 + 1.0) / (f64::from(worst) * 1e-3) / 1e9,
        MEGABYTES,
        MEGABYTES
    );
    let ok = reports.iter().all(|r| r.weft_error < 1e-6 && r.nccl_error < 1e-6);
    println!("check against the f64 host reference: {}", if ok { "passed" } else { "FAILED" });
    if ok {
        Ok(())
    } else {
        Err("the all-reduce result does not match the host reference".into())
    }
}

fn rank(comm: &Communicator) -> std::result::Result<RankReport, weft::host::Error> {
    let stream = comm.context().new_stream()?;
    let n = ELEMENTS;
    // One full wave of blocks for this kernel on this GPU (grid-stride loops cover the rest).
    let spec =
        KernelSpec { name: lsa_allreduce::NAME, source: lsa_allreduce::SOURCE, entry_point: "lsa_allreduce__f32" };
    let cfg = LaunchConfig::one_wave(&weft::host::jit::function(comm.context(), &spec)?, &stream, 512)?;
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&lsa_allreduce::requirements(&cfg))?;
    let mut window = comm.alloc_window::<f32>(&stream, n, WindowFlags::COLL_SYMMETRIC)?;
    window.buffer_mut().copy_from_host(&input(comm.rank(), n))?;
    let mut weft_out = stream.clone_htod(&vec![f32::NAN; n])?;
    let mut nccl_out = stream.clone_htod(&vec![f32::NAN; n])?;

    // The host reference, in f64.
    let mut reference = vec![0f64; n];
    for r in 0..comm.nranks() {
        for (acc, v) in reference.iter_mut().zip(input(r, n)) {
            *acc += f64::from(v);
        }
    }

    // Checked runs first (outputs poisoned with NaN above), then timed ones.
    lsa_allreduce::launch(&stream, cfg, &dev, &window, &mut weft_out, n)?;
    comm.all_reduce(window.buffer(), &mut nccl_out, ReduceOp::Sum, &stream)?;
    let weft_error = relative_error(&stream.clone_dtoh(&weft_out)?, &reference);
    let nccl_error = relative_error(&stream.clone_dtoh(&nccl_out)?, &reference);

    let start = comm.context().new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = comm.context().new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    let (mut weft_times, mut nccl_times) = (Vec::new(), Vec::new());
    for iteration in 0..ITERATIONS + 3 {
        start.record(&stream)?;
        lsa_allreduce::launch(&stream, cfg, &dev, &window, &mut weft_out, n)?;
        end.record(&stream)?;
        let weft = start.elapsed_ms(&end)?;
        start.record(&stream)?;
        comm.all_reduce(window.buffer(), &mut nccl_out, ReduceOp::Sum, &stream)?;
        end.record(&stream)?;
        let nccl = start.elapsed_ms(&end)?;
        if iteration >= 3 {
            weft_times.push(weft);
            nccl_times.push(nccl);
        }
    }
    stream.synchronize()?;
    Ok(RankReport {
        rank: comm.rank(),
        weft_ms: median(weft_times),
        nccl_ms: median(nccl_times),
        weft_error,
        nccl_error,
    })
}

fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    let (mut diff, mut norm) = (0.0, 0.0);
    for (g, w) in got.iter().zip(want) {
        let g = f64::from(*g);
        if !g.is_finite() {
            return f64::INFINITY;
        }
        diff += (g - w) * (g - w);
        norm += w * w;
    }
    (diff / norm).sqrt()
}

/// No GPU: prove the toolchain by compiling the kernel for sm_90 against every NCCL release's headers found.
fn without_gpu(why: &str) -> Result<()> {
    println!("No GPU here: {why}.");
    let sets = header_sets()?;
    let nvcc = sets.0;
    let cache_dir = std::env::temp_dir().join(format!("weft-quickstart-{}", std::process::id()));
    let cache = KernelCache::new(&cache_dir);
    println!(
        "  `{}`: {} lines of generated CUDA C++, entry points {:?}",
        lsa_allreduce::NAME,
        lsa_allreduce::SOURCE.lines().count(),
        lsa_allreduce::ENTRY_POINTS
    );
    for include in &sets.1 {
        let toolchain = Toolchain::from_paths(&nvcc, include, None)?;
        let started = Instant::now();
        let request =
            CompileRequest::new(lsa_allreduce::NAME, lsa_allreduce::SOURCE, weft::device::WEFT_CUH, GpuArch::SM_90);
        let kernel = cache.get_or_compile(&toolchain, &request)?;
        println!(
            "  compiled `{}` for sm_90 against NCCL {} headers with nvcc {}: {} byte cubin in {:.1} s",
            lsa_allreduce::NAME,
            toolchain.nccl_version,
            toolchain.nvcc_release(),
            kernel.cubin.len(),
            started.elapsed().as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&cache_dir);
    println!(
        "\nOn a machine with NVIDIA GPUs this example runs one rank per GPU: it all-reduces {} MB of f32 per rank \
         with the kernel above and with ncclAllReduce, checks both against an f64 host reference, and prints \
         the median time of each over {ITERATIONS} runs.",
        MEGABYTES
    );
    Ok(())
}

/// nvcc and the NCCL include directories to compile against: the environment's (`WEFT_NVCC`,
/// `WEFT_CODEGEN_NCCL_INCLUDES`), else the toolchain `cargo xtask` provisions — provisioned now if missing.
fn header_sets() -> Result<(PathBuf, Vec<PathBuf>)> {
    if let (Ok(nvcc), Ok(spec)) = (std::env::var("WEFT_NVCC"), std::env::var("WEFT_CODEGEN_NCCL_INCLUDES")) {
        let dirs = spec.split(';').filter_map(|e| e.split_once('=')).map(|(_, dir)| PathBuf::from(dir)).collect();
        return Ok((PathBuf::from(nvcc), dirs));
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let toolchain = root.join("target/weft-toolchain");
    if !toolchain.join("stamp").is_file() {
        println!("Provisioning the CUDA/NCCL toolchain first (`cargo xtask provision`, once; pip downloads)...");
        let status = Command::new(env!("CARGO")).args(["xtask", "provision"]).current_dir(&root).status()?;
        if !status.success() {
            return Err("`cargo xtask provision` failed; run `cargo xtask doctor` for what is missing".into());
        }
    }
    let site = std::fs::read_dir(toolchain.join("venv/lib"))?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("site-packages/nvidia/cu13/bin/nvcc"))
        .find(|p| p.is_file())
        .ok_or("the provisioned toolchain has no nvcc; run `cargo xtask doctor`")?;
    let includes = ["nccl-2.28.9", "nccl-2.32.3"]
        .iter()
        .map(|v| toolchain.join(v).join("nvidia/nccl/include"))
        .filter(|p| p.join("nccl.h").is_file())
        .collect();
    Ok((site, includes))
}
