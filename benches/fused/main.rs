//! Fused weft kernels against their unfused baselines, in one process, one rank per visible GPU.
//!
//! For each case (`benches/fused/cases/`), at each element type and message size: fresh random inputs, both
//! sides checked against an f64 host reference with their outputs poisoned first, then both sides timed with
//! CUDA events behind a spin kernel, medians of many runs, input sets rotated where they fit in L2. Prints a
//! table and writes `fused.csv` and `fused.svg` (speedup against size) to `WEFT_BENCH_OUT` (default
//! `target/bench/`). See `bench/README.md` for the columns and the knobs (`WEFT_BENCH_QUICK=1`,
//! `WEFT_BENCH_CASES=allreduce,…`, `WEFT_BENCH_DTYPES`, `WEFT_BENCH_SIZES`, `WEFT_BENCH_LIMIT_GBPS`).
//!
//! `cargo bench --bench fused`, `cargo xtask bench`, or the packed binary on the GPU machine. Command-line
//! arguments are ignored (cargo passes `--bench`, test runners pass their own flags); the knobs are environment
//! variables. Without a GPU it says so, measures nothing and exits 0; with one it exits 1 if any check failed.

mod cases;
mod harness;

use weft_kit::bench::{options, plot, report, stats};
use weft_kit::{kernels, spin};

use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use weft::host::jit::{CompileRequest, GpuArch, KernelCache, Toolchain};

use crate::harness::{Case, CollectiveBarrier, ThreadBarrier};
use crate::options::{format_size, Options};
use crate::report::Row;
use weft_kit::common::Ranks;

fn main() -> ExitCode {
    let options = match Options::from_env() {
        Ok(options) => options,
        Err(problem) => {
            eprintln!("fused bench: {problem}");
            return ExitCode::from(2);
        }
    };
    let all = cases::all();
    let known: Vec<&str> = all.iter().map(|case| case.name()).collect();
    let unknown = options.unknown_cases(&known);
    if !unknown.is_empty() {
        let pending: Vec<&str> = cases::PENDING.iter().map(|p| p.name).collect();
        eprintln!(
            "fused bench: WEFT_BENCH_CASES names {unknown:?}; measurable cases: {known:?}; not measurable yet: \
             {pending:?}"
        );
        return ExitCode::from(2);
    }
    let mut selected: Vec<&dyn Case> = all.into_iter().filter(|case| options.selects(case.name())).collect();
    if options.graph {
        // Graph replay measures only the cases whose both sides can be captured; the others say why.
        selected.retain(|case| match case.not_capturable() {
            None => true,
            Some(why) => {
                println!("fused bench: WEFT_BENCH_GRAPH=1 skips {}: {why}", case.name());
                false
            }
        });
    }

    // Ask the driver first: cudarc panics where there is no libcuda.
    match weft::host::cuda::device_count() {
        Ok(gpus) if gpus > 0 => {}
        Ok(_) => return without_gpu("the CUDA driver reports no GPU", &options, &selected),
        Err(error) => return without_gpu(&error.to_string(), &options, &selected),
    };
    // One process over the GPUs (WEFT_RANKS), or one rank per process under torchrun / srun / mpirun.
    let ranks = match weft_kit::common::Ranks::from_env() {
        Ok(ranks) => ranks,
        Err(error) => {
            eprintln!("fused bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    match measure(&ranks, &options, &selected) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("fused bench: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The plan, printed instead of measurements where there is no GPU.
fn without_gpu(why: &str, options: &Options, cases: &[&dyn Case]) -> ExitCode {
    println!("fused bench: no GPU here ({why}); nothing was measured.");
    println!("On a machine with NVIDIA GPUs it would run, one rank per GPU (WEFT_RANKS=n: n ranks):");
    print_plan(options, cases);
    print_pending();
    match compile_check(cases) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fused bench: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Compiles the benchmark's own CUDA C++ (the spin kernel, the baselines' epilogues) for sm_90 against every
/// NCCL release's headers that `cargo xtask` provisioned, so that a broken baseline fails here and not on the
/// GPU machine. The weft kernels are compiled by `tests/codegen.rs`.
fn compile_check(cases: &[&dyn Case]) -> AnyResult<()> {
    let (Ok(nvcc), Ok(includes)) = (std::env::var("WEFT_NVCC"), std::env::var("WEFT_CODEGEN_NCCL_INCLUDES")) else {
        println!(
            "\n(WEFT_NVCC and WEFT_CODEGEN_NCCL_INCLUDES are not set: run through `cargo xtask bench` to also \
             compile the baselines' CUDA C++ for sm_90 here)"
        );
        return Ok(());
    };
    let mut sources = vec![("weft_bench_spin", spin::SPIN_SOURCE)];
    for &(name, source) in cases.iter().flat_map(|case| case.cuda_sources()) {
        if !sources.iter().any(|&(known, _)| known == name) {
            sources.push((name, source));
        }
    }
    let cache_dir = std::env::temp_dir().join(format!("weft-bench-compile-{}", std::process::id()));
    let cache = KernelCache::new(&cache_dir);
    println!();
    let outcome = (|| -> AnyResult<()> {
        for include in includes.split(';').filter_map(|entry| entry.split_once('=')).map(|(_, dir)| dir) {
            let toolchain = Toolchain::from_paths(&nvcc, include, None)?;
            for &(name, source) in &sources {
                let request = CompileRequest::new(name, source, weft::device::WEFT_CUH, GpuArch::SM_90);
                let compiled = cache.get_or_compile(&toolchain, &request)?;
                println!(
                    "compiled `{name}` for sm_90 against NCCL {} headers: {} byte cubin",
                    toolchain.nccl_version,
                    compiled.cubin.len()
                );
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&cache_dir);
    outcome
}

fn print_plan(options: &Options, cases: &[&dyn Case]) {
    let width = cases.iter().map(|case| case.name().len()).max().unwrap_or(0);
    for case in cases {
        println!("  {:<width$}  {}\n  {:<width$}    vs {}", case.name(), case.fused(), "", case.baseline());
    }
    let sizes: Vec<String> = options.sizes.iter().map(|&bytes| format_size(bytes)).collect();
    let dtypes: Vec<&str> = options.dtypes.iter().map(|dtype| dtype.name()).collect();
    println!("  sizes per rank: {}; element types: {}", sizes.join(", "), dtypes.join(", "));
    println!(
        "  {} warm-up and {}–{} timed runs per side{}",
        options.warmup(),
        options.iterations(usize::MAX),
        options.iterations(1),
        if options.quick { " (WEFT_BENCH_QUICK: a smoke run, not a measurement)" } else { "" }
    );
}

fn print_pending() {
    if cases::PENDING.is_empty() {
        return;
    }
    println!("\nNot measured yet (the fused kernel or its baseline has not been written):");
    for pending in cases::PENDING {
        println!("  {}: {}\n    waiting for {}", pending.name, pending.what, pending.waiting_for);
    }
}

type AnyResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn measure(ranks: &Ranks, options: &Options, cases: &[&dyn Case]) -> AnyResult<ExitCode> {
    let gpus = weft::host::cuda::device_count()?;
    let (nranks, ranks_per_gpu) = match ranks {
        Ranks::Local(placement) => (placement.nranks(), placement.max_ranks_per_gpu()),
        Ranks::Launched(job) => (job.world_size, job.ranks_on_gpu(gpus)),
    };
    // The toolchain and library first: a missing nvcc or mismatched NCCL headers fail here, with the fix,
    // before any communicator exists.
    let nccl = weft::host::sys::library()?.version().to_string();
    let nvcc = weft::host::jit::toolchain()?.nvcc_release().to_string();
    let gpu = cudarc::driver::CudaContext::new(0)?.name()?;
    let layout = match (nranks, ranks_per_gpu) {
        (1, _) => "1 rank".to_string(),
        (n, 1) => format!("{n} ranks, one per GPU"),
        (n, per) => {
            format!("{n} ranks, {per} per GPU (shared-GPU proxy: protocol and synchronisation cost, not NVLink)")
        }
    };
    let mode = if options.graph { ", each side replayed from a CUDA graph" } else { "" };
    // Ranks that are threads of this process: NCCL launches them each on its own (PARALLEL, NCCL's default) or in
    // lock step (GROUP), which is what ranks sharing a GPU need (docs/multi-rank.md, "Launch mode").
    let in_step = weft::host::placement::launches_in_step();
    let launch = match ranks {
        Ranks::Local(_) if nranks > 1 => format!(", NCCL launch mode {}", if in_step { "GROUP" } else { "PARALLEL" }),
        _ => String::new(),
    };
    let machine = format!("{gpu}, NCCL {nccl}, {layout}{mode}{launch}");
    println!("weft fused-kernel benchmark: {machine}, nvcc {nvcc}");
    if matches!(ranks, Ranks::Local(_)) && ranks_per_gpu > 1 && !in_step {
        println!(
            "fused bench: ranks share a GPU in this process and NCCL_LAUNCH_MODE is not GROUP: a rank's launch can \
             queue behind a peer's wait and stop the run (zero_adam at 8 ranks did in 18 of 24 runs); start the \
             process with NCCL_LAUNCH_MODE=GROUP (docs/multi-rank.md, \"Launch mode\")"
        );
    }
    print_plan(options, cases);

    let total: usize =
        cases.iter().map(|case| options.dtypes.iter().filter(|d| case.dtypes().contains(d)).count()).sum::<usize>()
            * options.sizes.len();
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} {msg}")
            .map_err(|e| e.to_string())?
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    let on_row = |rank: usize, row: &Row| {
        if rank != 0 {
            return;
        }
        let line = format!(
            "{} {} {}: {:.2}x{}",
            row.case,
            row.dtype.name(),
            format_size(row.bytes),
            row.speedup(),
            if row.passed() { "" } else { " (check FAILED)" }
        );
        if bar.is_hidden() {
            eprintln!("fused bench: {line}");
        }
        bar.set_message(line);
        bar.inc(1);
    };

    harness::set_settle_limit(options.settle);
    let per_rank = match ranks {
        Ranks::Local(placement) => {
            let barrier = ThreadBarrier::new(nranks);
            weft::host::spmd(placement.devices(), &weft::host::Config::new(), |comm| {
                harness::run_rank(comm, options, cases, &barrier, &on_row)
            })
        }
        Ranks::Launched(_) => ranks.run(&weft::host::Config::new(), |comm| {
            let barrier = CollectiveBarrier::new(comm)?;
            harness::run_rank(comm, options, cases, &barrier, &on_row)
        }),
    };
    bar.finish_and_clear();
    let rows = report::merge_ranks(per_rank?);
    if ranks.first_rank() != 0 {
        // Under a launcher every process measured its own rank; rank 0 reports (and writes the files).
        println!("rank {}: measured; rank 0 prints the table", ranks.first_rank());
        return Ok(if rows.iter().all(Row::passed) { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }

    let limit_gbps = options.limit_for(nranks, ranks_per_gpu);
    println!("\n{}", report::table(&rows, limit_gbps));
    // The default limits were measured on an H200: on another GPU the column says so rather than pass them off as
    // that GPU's own.
    let elsewhere = if options.limit_gbps.is_none() && !gpu.contains("H200") {
        format!(", measured on an H200, not this {gpu}: WEFT_BENCH_LIMIT_GBPS sets its own")
    } else {
        String::new()
    };
    println!(
        "speedup = baseline / weft (median µs, slowest rank); GB/s = the fused pass's minimal bytes per rank / weft \
         time; % limit of {limit_gbps} GB/s ({}{elsewhere}); bus GB/s = all-reduce bus bandwidth, size / time x \
         2(n-1)/n",
        if options.limit_gbps.is_some() {
            "WEFT_BENCH_LIMIT_GBPS"
        } else if nranks == 1 {
            "the H200's copy rate"
        } else if ranks_per_gpu > 1 {
            "each rank's share of the H200's copy rate"
        } else {
            "NVLink per direction per GPU"
        }
    );
    std::fs::create_dir_all(&options.out_dir)?;
    let csv_path = options.out_dir.join("fused.csv");
    std::fs::write(&csv_path, report::csv(&rows, limit_gbps, &gpu, &nccl))?;
    println!("wrote {}", csv_path.display());
    let svg_path = options.out_dir.join("fused.svg");
    match plot::write_speedup_svg(&svg_path, &rows, &machine) {
        Ok(()) => println!("wrote {}", svg_path.display()),
        Err(problem) => eprintln!("fused bench: no plot: {problem}"),
    }
    print_pending();

    let failed = rows.iter().filter(|row| !row.passed()).count();
    if failed > 0 {
        eprintln!("fused bench: {failed} measurement(s) FAILED the check against the host reference");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
