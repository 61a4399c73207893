//! The block GEMM mainloop (`gemm_block`, device/src/gemm.rs, through kit's `gemm_tiles` kernel) against cuBLAS
//! (`cublasGemmEx`, bf16 in and out, f32 compute, cudarc's `cublas`) on the same GPU, in one process, on the same
//! inputs: bf16, row-major `C (M x N) = A (M x K) * B (K x N)` at tensor-parallel shapes. Each side runs
//! `REPEATS` times between two CUDA events, sides alternating, over `ROUNDS` rounds; the median per GEMM is
//! reported with its TFLOP/s and the ratio weft / cuBLAS in throughput (the target: at least 0.5 with
//! `mma.sync` alone). Both results are compared with each other (relative Frobenius error) before timing.
//!
//! `cargo bench --bench gemm` (or the packed binary on the GPU machine). It needs libcublas on the library path
//! (a CUDA toolkit's lib64, or PyTorch's `nvidia/cublas/lib`); without it, or without a GPU, it says so and
//! measures nothing. `WEFT_BENCH_QUICK=1`: two shapes, fewer rounds. With `WEFT_BENCH_OUT` set, also writes
//! `gemm.csv` there.
//!
//! It also measures what bounds a block GEMM whose tiles come from L2: the L2 -> SM read bandwidth
//! (`benches/cuda/l2_read.cu`: one wave of threads streaming a 16 MiB buffer, `ld.global.cg`, several passes), the
//! same from memory (a 2 GiB buffer), and the throughput the L2 figure allows a 128 x 128 tile of bf16 operands (64
//! FLOP per byte read; docs/gemm.md), and the `mma.sync m16n8k16` ceiling (`benches/cuda/mma_peak.cu`: independent
//! MMAs from registers with 8 and 16 warps per SM, nothing else running; `mma_peak.csv`), the rate the `mma.sync`
//! loops are a share of. Then, on a GPU with `wgmma` (compute capability 9.0), an experiment that tests
//! that bound: `benches/cuda/gemm_wide.cu`, the same `wgmma` mainloop with 128 x 256 tiles (85 FLOP per byte), against
//! cuBLAS again (its layouts are checked on the CPU by `scripts/gemm_wide_model.py`). Last (a trap in it loses the
//! CUDA context), a second one: `benches/cuda/gemm_tma.cu`, the whole Hopper mainloop around the same tile (TMA loads
//! by a producer warpgroup, mbarriers, two `wgmma` consumer warpgroups, persistent blocks), modelled on the CPU by
//! `scripts/gemm_tma_model.py`; then the same with clusters of two CTAs that share B through TMA multicast.
//! `gemm_wide.csv`, `gemm_weft_tma.csv`, `gemm_weft_tma_store.csv`, `gemm_tma.csv`, `gemm_tma_cluster.csv` and
//! `l2.csv` beside `gemm.csv`.

use weft_kit::test_kernels::{gemm_tiles, gemm_tma, gemm_tma_store};

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use half::bf16;
use weft::host::launch::{launch_raw, ArgBuffer, TmaMatrix};
use weft::host::LaunchConfig;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const SHAPES: &[(usize, usize, usize)] =
    &[(4096, 4096, 4096), (8192, 8192, 4096), (16384, 4096, 8192), (4096, 8192, 8192), (16384, 8192, 8192)];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn random(len: usize, seed: u64) -> Vec<bf16> {
    weft_kit::common::random(len, seed).into_iter().map(bf16::from_f32).collect()
}

fn relative_error(got: &[bf16], want: &[bf16]) -> f64 {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (f64::from(g.to_f32()), f64::from(w.to_f32()));
        diff += (g - w).powi(2);
        norm += w * w;
    }
    (diff / norm).sqrt()
}

struct Row {
    shape: (usize, usize, usize),
    weft_ms: f64,
    cublas_ms: f64,
    error: f64,
}

fn main() -> Result<()> {
    if weft::host::cuda::device_count().unwrap_or(0) == 0 {
        eprintln!("gemm bench: no CUDA GPU visible; this benchmark needs one (nothing measured)");
        return Ok(());
    }
    if !weft_kit::blas::available() {
        eprintln!("gemm bench: {} (nothing measured)", weft_kit::blas::MISSING);
        return Ok(());
    }
    let quick = std::env::var("WEFT_BENCH_QUICK").is_ok_and(|v| v == "1");
    let (shapes, rounds, repeats) = if quick { (&SHAPES[..2], 3, 5) } else { (SHAPES, 7, 10) };
    let ctx = weft::host::cuda::context(0)?;
    let stream: Arc<CudaStream> = ctx.new_stream()?;
    let blas = CudaBlas::new(stream.clone())?;
    let mainloop = match weft::host::jit::gemm_mainloop_on(ctx.compute_capability()?)? {
        weft::host::jit::GemmMainloop::Wgmma => "wgmma m64n128k16, sm_90a",
        weft::host::jit::GemmMainloop::MmaSync => "mma.sync + ldmatrix",
    };
    println!(
        "GEMM bf16 (f32 accumulate), row-major C = A * B: weft `gemm_block` (128 x 128 tiles, 256 threads, \
         {mainloop}, 3-stage cp.async) vs cuBLAS GemmEx; median of {rounds} rounds of {repeats}{}",
        if quick { " (WEFT_BENCH_QUICK: a smoke run)" } else { "" }
    );
    let mut rows = Vec::new();
    for &(m, n, k) in shapes {
        let a = stream.clone_htod(&random(m * k, 1))?;
        let b = stream.clone_htod(&random(k * n, 2))?;
        let mut c_weft = stream.alloc_zeros::<bf16>(m * n)?;
        let mut c_blas = stream.alloc_zeros::<bf16>(m * n)?;
        let cfg = LaunchConfig::linear(u32::try_from((m / 128) * (n / 128))?, 256);
        gemm_tiles::launch(&stream, cfg, &a, &b, &mut c_weft, m, n, k)?;
        weft_kit::blas::gemm(&blas, &a, &b, &mut c_blas, (m, n, k))?;
        let error = relative_error(
            &weft::host::cuda::download(&stream, &c_weft)?,
            &weft::host::cuda::download(&stream, &c_blas)?,
        );
        let [weft_ms, cublas_ms] = alternate(
            &ctx,
            &stream,
            Timing { rounds, repeats },
            [&mut || Ok(gemm_tiles::launch(&stream, cfg, &a, &b, &mut c_weft, m, n, k)?), &mut || {
                weft_kit::blas::gemm(&blas, &a, &b, &mut c_blas, (m, n, k)).map_err(Into::into)
            }],
        )?;
        rows.push(Row { shape: (m, n, k), weft_ms, cublas_ms, error });
    }
    println!(
        "\n{:>20} | {:>9} {:>8} | {:>9} {:>8} | {:>11} | {:>9}",
        "M x N x K", "weft ms", "TFLOP/s", "cuBLAS ms", "TFLOP/s", "weft/cuBLAS", "rel. err"
    );
    let mut csv = String::from("m,n,k,weft_ms,cublas_ms,weft_tflops,cublas_tflops,ratio,relative_error\n");
    for row in &rows {
        let (m, n, k) = row.shape;
        let flops = 2.0 * m as f64 * n as f64 * k as f64;
        let (tw, tc) = (flops / row.weft_ms / 1e9, flops / row.cublas_ms / 1e9);
        println!(
            "{:>20} | {:>9.3} {:>8.1} | {:>9.3} {:>8.1} | {:>10.2}x | {:>9.1e}",
            format!("{m}x{n}x{k}"),
            row.weft_ms,
            tw,
            row.cublas_ms,
            tc,
            tw / tc,
            row.error
        );
        csv += &format!("{m},{n},{k},{},{},{tw},{tc},{},{}\n", row.weft_ms, row.cublas_ms, tw / tc, row.error);
    }
    let probe_timing = Timing { rounds: if quick { 3 } else { 7 }, repeats: 1 };
    let probe = weft_kit::common::Baseline::load(&ctx, "l2_read", include_str!("cuda/l2_read.cu"))?;
    let probe = probe.function("l2_read")?;
    let l2 = read_bandwidth(&ctx, &stream, &probe, L2_BYTES, 32, probe_timing)?;
    let hbm = read_bandwidth(&ctx, &stream, &probe, HBM_BYTES, 2, probe_timing)?;
    // A 128 x 128 tile reads 128 rows of A and 128 columns of B per k: 512 bytes of bf16 for 2 * 128 * 128 FLOP.
    let bound = l2 * TILE_FLOP_PER_BYTE / 1e12;
    let best =
        rows.iter().map(|r| 2.0 * (r.shape.0 * r.shape.1 * r.shape.2) as f64 / r.weft_ms / 1e9).fold(0.0, f64::max);
    println!(
        "\nL2 -> SM reads: {:.2} TB/s (a 16 MiB buffer, one wave of 512-thread blocks, ld.global.cg, median of \
         rounds); memory -> SM reads: {:.2} TB/s (a 2 GiB buffer, the same kernel); a 128 x 128 bf16 tile fed from \
         L2 ({TILE_FLOP_PER_BYTE} FLOP per byte) is bounded at {bound:.0} TFLOP/s: weft's best above is {:.0}% of \
         that bound",
        l2 / 1e12,
        hbm / 1e12,
        100.0 * best / bound
    );
    // The mma.sync ceiling (benches/cuda/mma_peak.cu), where the GPU has mma.sync m16n8k16 (compute capability 8.0
    // and newer): independent MMAs from registers, nothing else running; what the mma.sync loops are a share of.
    let mma_peak = if ctx.compute_capability()?.0 >= 8 {
        let peak = weft_kit::common::Baseline::load(&ctx, "mma_peak", include_str!("cuda/mma_peak.cu"))?;
        let peak = peak.function("mma_peak")?;
        let sms = u32::try_from(
            ctx.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        )?;
        let at8 = mma_rate(&ctx, &stream, &peak, sms, 8, probe_timing)?;
        let at16 = mma_rate(&ctx, &stream, &peak, sms, 16, probe_timing)?;
        let best = at8.max(at16);
        let cublas_best = rows.iter().map(|r| 2.0 * (r.shape.0 * r.shape.1 * r.shape.2) as f64 / r.cublas_ms / 1e9);
        let cublas_best = cublas_best.fold(0.0, f64::max);
        println!(
            "mma.sync m16n8k16 ceiling (bf16 in, f32 accumulate; 16 independent MMAs per warp from registers, nothing \
             else running): {:.0} TFLOP/s with 8 warps per SM (the mma.sync loops' count), {:.0} with 16; {:.2}x the \
             best cuBLAS GEMM above, so an mma.sync loop at 0.5x cuBLAS runs at {:.0}% of it",
            at8 / 1e12,
            at16 / 1e12,
            best / 1e12 / cublas_best,
            100.0 * 0.5 * cublas_best / (best / 1e12)
        );
        Some(best)
    } else {
        None
    };
    let out_dir = std::env::var_os("WEFT_BENCH_OUT").map(std::path::PathBuf::from);
    if let Some(dir) = &out_dir {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("gemm.csv"), csv)?;
        if let Some(peak) = mma_peak {
            std::fs::write(dir.join("mma_peak.csv"), format!("mma_sync_peak_flops_per_s\n{peak}\n"))?;
        }
        std::fs::write(
            dir.join("l2.csv"),
            format!(
                "l2_bytes_per_s,memory_bytes_per_s,tile_flop_per_byte,tile_bound_tflops\n{l2},{hbm},\
                 {TILE_FLOP_PER_BYTE},{bound}\n"
            ),
        )?;
    }
    // The experiments come after everything else and on their own: a failure of one (a wrong result is printed as
    // such) costs nothing above.
    let timing = Timing { rounds, repeats };
    let out = out_dir.as_deref();
    report(
        wide_experiment(&ctx, &stream, &blas, timing, l2, &rows),
        out,
        "gemm_wide.csv",
        "the 128 x 256-tile experiment",
    )?;
    // Last of all GPU work: a trap in these kernels (their bounded barrier waits) loses the CUDA context. The loop is
    // TMA + wgmma on Hopper (unless WEFT_GEMM_MAINLOOP=mma_sync), cp.async + mma.sync elsewhere (its own files).
    let wgmma = weft::host::jit::gemm_mainloop_on(ctx.compute_capability()?)? == weft::host::jit::GemmMainloop::Wgmma;
    let (plain, stored) = if wgmma {
        ("gemm_weft_tma.csv", "gemm_weft_tma_store.csv")
    } else {
        ("gemm_weft_tiles_mma_sync.csv", "gemm_weft_tiles_mma_sync_store.csv")
    };
    report(weft_tma(&ctx, &stream, &blas, timing, &rows, false, wgmma), out, plain, "weft's gemm_tiles loop")?;
    report(
        weft_tma(&ctx, &stream, &blas, timing, &rows, true, wgmma),
        out,
        stored,
        "weft's gemm_tiles loop with gemm_store",
    )?;
    for (cluster, file) in [(1, "gemm_tma.csv"), (2, "gemm_tma_cluster.csv")] {
        let what = if cluster == 1 { "the TMA experiment" } else { "the TMA experiment with clusters of 2" };
        report(tma_experiment(&ctx, &stream, &blas, timing, l2, &rows, cluster), out, file, what)?;
    }
    // Both sides compute the same products from the same bf16 inputs; they differ by rounding and summation order.
    let worst = rows.iter().map(|r| r.error).fold(0.0, f64::max);
    if worst > 1e-2 {
        return Err(format!("weft's GEMM differs from cuBLAS's (relative error {worst:.1e}): a wrong result").into());
    }
    Ok(())
}

/// FLOP per byte of operands a 128 x 128 tile of bf16 reads: `2 * 128 * 128` per k over `2 * (128 + 128)` bytes.
const TILE_FLOP_PER_BYTE: f64 = 64.0;

/// The L2 probe's buffer: 16 MiB stays in the H200's L2 (50 MB).
const L2_BYTES: usize = 16 << 20;
/// The memory probe's buffer: 2 GiB, far past L2.
const HBM_BYTES: usize = 2 << 30;

/// Read bandwidth in bytes per second: one wave of `l2_read` (`probe`) over a buffer of `bytes`, `passes` passes
/// per launch, timed as `timing` says. A buffer that fits in L2 measures L2 -> SM reads; a larger one, memory -> SM
/// reads.
fn read_bandwidth(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    probe: &cudarc::driver::CudaFunction,
    bytes: usize,
    passes: u32,
    timing: Timing,
) -> Result<f64> {
    let cfg = LaunchConfig::one_wave(probe, stream, 512)?;
    let x = stream.alloc_zeros::<u32>(bytes / 4)?;
    let mut out = stream.alloc_zeros::<u32>(usize::try_from(cfg.grid_size() * cfg.block_size())?)?;
    let [ms] = alternate(
        ctx,
        stream,
        timing,
        [&mut || {
            let mut args = ArgBuffer::new();
            let read = args.slice_arg(&x, stream)?;
            let written = args.slice_arg_mut(&mut out, stream)?;
            args.push(read.ptr);
            args.push(bytes / 16);
            args.push(passes);
            args.push(written.ptr);
            // SAFETY: the arguments are l2_read's (const uint4*, size_t, unsigned, unsigned*), in order; `x` holds
            // bytes / 16 vectors of 16 bytes (cudarc allocations are 256-byte aligned) and `out` one word per thread of
            // `cfg`; both outlive the launch (they are freed after `alternate` settled the stream), and `args` is
            // dropped after the launch, recording the uses.
            unsafe { launch_raw(probe, stream, &cfg, &mut args)? };
            Ok(())
        }],
    )?;
    Ok((bytes as f64 * f64::from(passes)) / (ms / 1e3))
}

/// The MMAs one launch of `mma_peak` issues per warp: 16 chains of `MMA_PEAK_ITERATIONS` (about a millisecond).
const MMA_PEAK_ITERATIONS: u32 = 8192;

/// `mma.sync m16n8k16` throughput in FLOP per second: `mma_peak` (`probe`) with `warps` warps on each of the `sms`
/// multiprocessors (blocks of 256 threads, `warps / 8` per SM), timed as `timing` says.
fn mma_rate(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    probe: &cudarc::driver::CudaFunction,
    sms: u32,
    warps: u32,
    timing: Timing,
) -> Result<f64> {
    let cfg = LaunchConfig::linear(sms * (warps / 8), 256);
    let mut out = stream.alloc_zeros::<f32>(usize::try_from(cfg.grid_size() * cfg.block_size())?)?;
    let [ms] = alternate(
        ctx,
        stream,
        timing,
        [&mut || {
            let mut args = ArgBuffer::new();
            let written = args.slice_arg_mut(&mut out, stream)?;
            args.push(MMA_PEAK_ITERATIONS);
            args.push(written.ptr);
            // SAFETY: the arguments are mma_peak's (unsigned, float*), in order; `out` holds one float per thread of
            // `cfg` and outlives the launch (it is freed after `alternate` settled the stream), and `args` is dropped
            // after the launch, recording the use.
            unsafe { launch_raw(probe, stream, &cfg, &mut args)? };
            Ok(())
        }],
    )?;
    // 16 MMAs of 16 x 8 x 16 multiply-adds (2 FLOP each) per warp and iteration.
    let flop = 2.0 * 16.0 * 8.0 * 16.0 * 16.0 * f64::from(MMA_PEAK_ITERATIONS) * f64::from(warps) * f64::from(sms);
    Ok(flop / (ms / 1e3))
}

/// How a side is timed: `repeats` runs between two CUDA events, over `rounds` rounds after one to warm up.
#[derive(Clone, Copy)]
struct Timing {
    rounds: usize,
    repeats: usize,
}

/// Times each of `sides` (one run each) as `timing` says, each round starting with the next side; the median
/// milliseconds per run of each.
fn alternate<const N: usize>(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    Timing { rounds, repeats }: Timing,
    sides: [&mut dyn FnMut() -> Result<()>; N],
) -> Result<[f64; N]> {
    // cudarc's default event flags disable timing (`elapsed_ms` is then CUDA_ERROR_INVALID_HANDLE).
    let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    let (start, stop) = (ctx.new_event(timed)?, ctx.new_event(timed)?);
    let mut ms_of: [Vec<f64>; N] = std::array::from_fn(|_| Vec::new());
    for round in 0..rounds + 1 {
        for side in (0..N).map(|i| (i + round) % N) {
            start.record(stream)?;
            for _ in 0..repeats {
                sides[side]()?;
            }
            stop.record(stream)?;
            weft::host::cuda::settle(stream)?;
            // Round 0 warms every side up (clocks, cuBLAS's heuristics, the kernels' loads).
            if round > 0 {
                ms_of[side].push(f64::from(start.elapsed_ms(&stop)?) / repeats as f64);
            }
        }
    }
    Ok(ms_of.map(median))
}

/// FLOP per byte of operands a 128 x 256 tile of bf16 reads: `2 * 128 * 256` per k over `2 * (128 + 256)` bytes.
const WIDE_TILE_FLOP_PER_BYTE: f64 = 65536.0 / 768.0;

/// The 128 x 256-tile experiment against cuBLAS at every shape, where the GPU has `wgmma`: prints its table and
/// returns its CSV (`None` where it cannot run). `l2` is the measured L2 read bandwidth, `rows` the main results
/// (their shapes are the experiment's).
fn wide_experiment(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    blas: &CudaBlas,
    timing: Timing,
    l2: f64,
    rows: &[Row],
) -> Result<Option<String>> {
    let Some(wide) = WideTile::load(ctx)? else { return Ok(None) };
    let intro = format!(
        "Experiment (benches/cuda/gemm_wide.cu, hand-written, not weft's API): the wgmma mainloop with 128 x 256 \
         tiles (m64n256k16, 3 stages in 72 KB of dynamic shared memory, one block per SM), against cuBLAS again; \
         bound by L2 at {:.0} TFLOP/s (85 FLOP per byte)",
        l2 * WIDE_TILE_FLOP_PER_BYTE / 1e12
    );
    let experiment = Experiment { label: "wide", intro: &intro };
    experiment.run(ctx, stream, blas, timing, rows, &|a, b, c, shape| wide.launch(stream, a, b, c, shape)).map(Some)
}

/// weft's own persistent loop (`a.gemm_tiles(&b)`: the TMA experiment's design behind weft's API, the epilogue
/// written in the kernel) against cuBLAS at every shape: TMA + `wgmma` where the GPU has it and the process compiles
/// for it (`wgmma`: compute capability 9.0, unless `WEFT_GEMM_MAINLOOP=mma_sync`), else the same pipeline with
/// `cp.async` and `mma.sync`. Prints its table and returns its CSV (`None` where the GPU runs neither). `paired`:
/// kit's `gemm_tma_store` (the tile scaled by 1.0 in place, then written by `out.gemm_store(&gemm, gemm.row0(),
/// gemm.col0(), n)`, two values per store), else kit's `gemm_tma` (a loop storing one value at a time).
fn weft_tma(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    blas: &CudaBlas,
    timing: Timing,
    rows: &[Row],
    paired: bool,
    wgmma: bool,
) -> Result<Option<String>> {
    use weft::host::launch::{gemm_tiles_config, TmaOperand};
    if let Err(why) = gemm_tiles_config(stream, 128, 256) {
        println!("\nweft's gemm_tiles loop does not run here: {why}");
        return Ok(None);
    }
    let (label, intro) = match (paired, wgmma) {
        (true, true) => (
            "weft_tma_store",
            "weft's TMA loop with `out.gemm_store(..)` (kit's `gemm_tma_store`: the tile scaled in place by \
             `set_value`, then two values per 4-byte store, one bounds check per tile), against cuBLAS again",
        ),
        (false, true) => (
            "weft_tma",
            "weft's TMA loop (kit's `gemm_tma`: `a.gemm_tiles(&b)` with the epilogue in the kernel, one value per \
             store; a TMA producer warpgroup, two m64n256k16 consumer warpgroups, 4 stages of 64-wide k, persistent \
             blocks), against cuBLAS again",
        ),
        (true, false) => (
            "weft_tiles_mma_sync_store",
            "weft's gemm_tiles loop on mma.sync with `out.gemm_store(..)` (kit's `gemm_tma_store`), against cuBLAS \
             again",
        ),
        (false, false) => (
            "weft_tiles_mma_sync",
            "weft's gemm_tiles loop on mma.sync (kit's `gemm_tma` with WEFT_GEMM_MAINLOOP=mma_sync: a cp.async \
             producer warpgroup into the same 4 swizzled stages, two consumer warpgroups of 64 x 64 mma.sync warp \
             squares fed by ldmatrix, persistent blocks), against cuBLAS again",
        ),
    };
    let experiment = Experiment { label, intro };
    experiment
        .run(ctx, stream, blas, timing, rows, &|a, b, c, (m, n, k)| {
            let (ta, tb) = (TmaOperand::gemm_a(a, m, k, k)?, TmaOperand::gemm_b(b, k, n, n)?);
            let cfg = gemm_tiles_config(stream, m, n)?;
            if paired {
                gemm_tma_store::launch(stream, cfg, &ta, &tb, c, 1.0)?;
            } else {
                gemm_tma::launch(stream, cfg, &ta, &tb, c)?;
            }
            Ok(())
        })
        .map(Some)
}

/// Writes an experiment's CSV as `file` in `out` (WEFT_BENCH_OUT), or says why `what` did not run: a failure of an
/// experiment (a wrong result is printed as such) costs nothing else.
fn report(result: Result<Option<String>>, out: Option<&std::path::Path>, file: &str, what: &str) -> Result<()> {
    match result {
        Ok(Some(csv)) => {
            if let Some(dir) = out {
                std::fs::write(dir.join(file), csv)?;
            }
        }
        Ok(None) => println!("\n({what} cannot run on this GPU: not run)"),
        Err(error) => println!("\n{what} failed: {error}"),
    }
    Ok(())
}

/// The TMA experiment against cuBLAS at every shape, with clusters of `cluster` CTAs (1, or 2 sharing B through
/// multicast), where the GPU has `wgmma` and TMA: prints its table and returns its CSV (`None` where it cannot run).
/// `l2` is the measured L2 read bandwidth, `rows` the main results (their shapes are the experiment's).
fn tma_experiment(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    blas: &CudaBlas,
    timing: Timing,
    l2: f64,
    rows: &[Row],
    cluster: u32,
) -> Result<Option<String>> {
    let Some(tma) = TmaTile::load(ctx)? else { return Ok(None) };
    // Each CTA of a pair reads its A (16 KB) and half of B (16 KB) per 64-wide stage: 32 KB for 2 * 128 * 256 * 64
    // FLOP, 128 per byte; alone, 48 KB (85 per byte).
    let (flop_per_byte, label, how) = if cluster == 1 {
        (WIDE_TILE_FLOP_PER_BYTE, "tma", format!("persistent blocks (up to {} SMs)", tma.sms))
    } else {
        (128.0, "tma2", format!("clusters of 2 CTAs sharing B by TMA multicast ({} clusters at once)", tma.clusters))
    };
    let intro = format!(
        "Experiment (benches/cuda/gemm_tma.cu, hand-written, not weft's API): 128 x 256 tiles, a TMA producer \
         warpgroup and two wgmma consumer warpgroups (m64n256k16), 4 stages of 64-wide k in 192 KB, mbarriers, \
         {how}, against cuBLAS again; bound by L2 at {:.0} TFLOP/s ({flop_per_byte:.0} FLOP per byte)",
        l2 * flop_per_byte / 1e12
    );
    let experiment = Experiment { label, intro: &intro };
    let gemm = |a: &_, b: &_, c: &mut _, shape| tma.launch(stream, a, b, c, shape, cluster);
    experiment.run(ctx, stream, blas, timing, rows, &gemm).map(Some)
}

/// `c = a * b` (`m x k` by `k x n`, row-major bf16) by one of the hand-written experiments.
type Gemm<'a> =
    &'a dyn Fn(&CudaSlice<bf16>, &CudaSlice<bf16>, &mut CudaSlice<bf16>, (usize, usize, usize)) -> Result<()>;

/// How a hand-written GEMM experiment is reported: `label` names its columns in the table and the CSV, `intro` is the
/// line above its table.
struct Experiment<'a> {
    label: &'a str,
    intro: &'a str,
}

impl Experiment<'_> {
    /// Checks `gemm` against cuBLAS at every shape of `rows` (the main results, whose weft times it is also compared
    /// with), times both sides as `timing` says, prints the table (a relative error above 1e-2 flagged as a wrong
    /// result) and returns it as CSV.
    fn run(
        &self,
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        blas: &CudaBlas,
        timing: Timing,
        rows: &[Row],
        gemm: Gemm<'_>,
    ) -> Result<String> {
        let Experiment { label, intro } = *self;
        println!(
            "\n{intro}\n{:>20} | {:>9} {:>8} | {:>11} | {:>11} | {:>9}",
            "M x N x K",
            format!("{label} ms"),
            "TFLOP/s",
            format!("{label}/cuBLAS"),
            format!("{label}/weft"),
            "rel. err"
        );
        let mut csv =
            format!("m,n,k,{label}_ms,cublas_ms,{label}_tflops,cublas_tflops,ratio_to_cublas,ratio_to_weft,error\n");
        for row in rows {
            let (m, n, k) = row.shape;
            let a = stream.clone_htod(&random(m * k, 1))?;
            let b = stream.clone_htod(&random(k * n, 2))?;
            let mut c_experiment = stream.alloc_zeros::<bf16>(m * n)?;
            let mut c_blas = stream.alloc_zeros::<bf16>(m * n)?;
            gemm(&a, &b, &mut c_experiment, (m, n, k))?;
            weft_kit::blas::gemm(blas, &a, &b, &mut c_blas, (m, n, k))?;
            let error = relative_error(
                &weft::host::cuda::download(stream, &c_experiment)?,
                &weft::host::cuda::download(stream, &c_blas)?,
            );
            let [experiment_ms, cublas_ms] = alternate(
                ctx,
                stream,
                timing,
                [&mut || gemm(&a, &b, &mut c_experiment, (m, n, k)), &mut || {
                    weft_kit::blas::gemm(blas, &a, &b, &mut c_blas, (m, n, k)).map_err(Into::into)
                }],
            )?;
            let flops = 2.0 * m as f64 * n as f64 * k as f64;
            let (tx, tc, tw) = (flops / experiment_ms / 1e9, flops / cublas_ms / 1e9, flops / row.weft_ms / 1e9);
            let wrong = if error > 1e-2 { "  WRONG RESULT" } else { "" };
            println!(
                "{:>20} | {experiment_ms:>9.3} {tx:>8.1} | {:>10.2}x | {:>10.2}x | {error:>9.1e}{wrong}",
                format!("{m}x{n}x{k}"),
                tx / tc,
                tx / tw
            );
            csv += &format!("{m},{n},{k},{experiment_ms},{cublas_ms},{tx},{tc},{},{},{error}\n", tx / tc, tx / tw);
        }
        Ok(csv)
    }
}

/// Compiles the experiment `source` (module `name`, kernel `{name}_bf16`) for sm_90a with its `wgmma` and loads it
/// with room for `shared_bytes` of dynamic shared memory, where the GPU is compute capability 9.0 (the only one with
/// `wgmma`); `None` elsewhere.
fn load_for_sm90a(
    ctx: &Arc<CudaContext>,
    name: &str,
    source: &str,
    shared_bytes: u32,
) -> Result<Option<(Arc<cudarc::driver::CudaModule>, cudarc::driver::CudaFunction)>> {
    use weft::host::jit::{self, CompileRequest, GemmMainloop, GpuArch};
    if ctx.compute_capability()? != (9, 0) {
        return Ok(None);
    }
    let request = CompileRequest::new(name, source, weft::device::WEFT_CUH, GpuArch::SM_90)
        .with_gemm_mainloop(GemmMainloop::Wgmma);
    let module = jit::load(ctx, &jit::compile_cubin(jit::toolchain()?, &request)?)?;
    let function = jit::load_function(&module, name, &format!("{name}_bf16"))?;
    let attribute = cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    function.set_attribute(attribute, i32::try_from(shared_bytes)?)?;
    Ok(Some((module, function)))
}

/// The 128 x 256-tile experiment (benches/cuda/gemm_wide.cu), compiled for sm_90a with its `wgmma`.
struct WideTile {
    _module: Arc<cudarc::driver::CudaModule>,
    function: cudarc::driver::CudaFunction,
}

impl WideTile {
    /// Its dynamic shared memory: 3 stages of 128 x 32 + 32 x 256 bf16, and 1 KB to align them (GEMM_WIDE_SMEM).
    const SHARED_BYTES: u32 = 3 * (128 * 32 + 32 * 256) * 2 + 1024;

    /// Compiles and loads it where the GPU is compute capability 9.0 (the only one with `wgmma`); `None` elsewhere.
    fn load(ctx: &Arc<CudaContext>) -> Result<Option<WideTile>> {
        let loaded = load_for_sm90a(ctx, "gemm_wide", include_str!("cuda/gemm_wide.cu"), Self::SHARED_BYTES)?;
        Ok(loaded.map(|(module, function)| WideTile { _module: module, function }))
    }

    /// `c = a * b` (`m x k` by `k x n`, row-major bf16), one block per 128 x 256 tile.
    fn launch(
        &self,
        stream: &Arc<CudaStream>,
        a: &CudaSlice<bf16>,
        b: &CudaSlice<bf16>,
        c: &mut CudaSlice<bf16>,
        (m, n, k): (usize, usize, usize),
    ) -> Result<()> {
        if !(m % 128 == 0 && n % 256 == 0 && k % 32 == 0 && a.len() >= m * k && b.len() >= k * n && c.len() >= m * n) {
            return Err(
                format!("gemm_wide: {m} x {n} x {k} needs m, n, k multiples of 128, 256, 32 and full buffers").into()
            );
        }
        let cfg = LaunchConfig::linear(u32::try_from((m / 128) * (n / 256))?, 256).with_shared_mem(Self::SHARED_BYTES);
        let mut args = ArgBuffer::new();
        let (a_arg, b_arg) = (args.slice_arg(a, stream)?, args.slice_arg(b, stream)?);
        let c_arg = args.slice_arg_mut(c, stream)?;
        args.push(a_arg.ptr);
        args.push(b_arg.ptr);
        args.push(c_arg.ptr);
        args.push(m);
        args.push(n);
        args.push(k);
        // SAFETY: the arguments are gemm_wide_bf16's (three pointers, three size_t), in order; the shapes meet its
        // preconditions (checked above: m, n, k multiples of 128, 256 and 32, and every tile inside a, b and c);
        // 256 threads and the dynamic shared memory it needs (its attribute set at load); the buffers outlive the
        // launch (`args`, dropped after it, records the uses, and they are freed only after the stream settles).
        unsafe { launch_raw(&self.function, stream, &cfg, &mut args)? };
        Ok(())
    }
}

/// The TMA experiment (benches/cuda/gemm_tma.cu), compiled for sm_90a with its `wgmma`, and the multiprocessors its
/// persistent blocks fill.
struct TmaTile {
    _module: Arc<cudarc::driver::CudaModule>,
    function: cudarc::driver::CudaFunction,
    /// gemm_tma_cluster_bf16: the same with clusters of two CTAs sharing B.
    cluster_function: cudarc::driver::CudaFunction,
    sms: u32,
    /// How many clusters of two its blocks can form at once (cuOccupancyMaxActiveClusters).
    clusters: u32,
}

impl TmaTile {
    /// Its dynamic shared memory: 4 stages of 128 x 64 + 64 x 256 bf16, 1 KB to align them, and the stages' 2 x 4
    /// mbarriers of 8 bytes (GEMM_TMA_SMEM: 197 696 bytes).
    const SHARED_BYTES: u32 = 4 * (128 * 64 + 64 * 256) * 2 + 1024 + 2 * 4 * 8;
    /// A producer warpgroup and two consumer warpgroups (GEMM_TMA_THREADS).
    const THREADS: u32 = 384;

    /// Compiles and loads it where the GPU is compute capability 9.0 (the only one with `wgmma`); `None` elsewhere.
    fn load(ctx: &Arc<CudaContext>) -> Result<Option<TmaTile>> {
        use cudarc::driver::sys;
        let loaded = load_for_sm90a(ctx, "gemm_tma", include_str!("cuda/gemm_tma.cu"), Self::SHARED_BYTES)?;
        let Some((module, function)) = loaded else { return Ok(None) };
        let cluster_function = weft::host::jit::load_function(&module, "gemm_tma", "gemm_tma_cluster_bf16")?;
        let attribute = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        cluster_function.set_attribute(attribute, i32::try_from(Self::SHARED_BYTES)?)?;
        let sms = u32::try_from(ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?)?;
        // The kernel's cluster size is compiled in (__cluster_dims__), so the configuration names none.
        let config = sys::CUlaunchConfig {
            gridDimX: 2 * sms,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: Self::THREADS,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: Self::SHARED_BYTES,
            hStream: std::ptr::null_mut(),
            attrs: std::ptr::null_mut(),
            numAttrs: 0,
        };
        let mut clusters = 0;
        ctx.bind_to_thread()?;
        // SAFETY: `cluster_function` is a live function of `ctx`'s module, `ctx` is current on this thread, `config`
        // names no attributes (a null pointer with a count of 0) and no stream, and `clusters` is a live i32 that the
        // call writes; nothing is launched.
        unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, cluster_function.cu_function(), &config) }
            .result()?;
        if clusters < 1 {
            return Err("gemm_tma: no cluster of two of its blocks fits on this GPU at once".into());
        }
        Ok(Some(TmaTile { _module: module, function, cluster_function, sms, clusters: u32::try_from(clusters)? }))
    }

    /// `c = a * b` (`m x k` by `k x n`, row-major bf16) with clusters of `cluster` CTAs (1 or 2): one block per
    /// multiprocessor, or one cluster per cluster that fits at once (fewer where there are fewer tiles), each
    /// striding over the tiles.
    fn launch(
        &self,
        stream: &Arc<CudaStream>,
        a: &CudaSlice<bf16>,
        b: &CudaSlice<bf16>,
        c: &mut CudaSlice<bf16>,
        (m, n, k): (usize, usize, usize),
        cluster: u32,
    ) -> Result<()> {
        let rows = 128 * cluster as usize;
        // TMA takes the kernel's coordinates as 32-bit signed integers.
        let fits = m.max(n).max(k) <= i32::MAX as usize;
        if !(cluster == 1 || cluster == 2)
            || !(m > 0 && n > 0 && k > 0 && m % rows == 0 && n % 256 == 0 && k % 64 == 0 && fits)
            || !(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n)
        {
            return Err(format!(
                "gemm_tma: {m} x {n} x {k} with clusters of {cluster} needs clusters of 1 or 2, m, n, k non-zero \
                 multiples of {rows}, 256, 64 (below 2^31) and full buffers"
            )
            .into());
        }
        let tiles = (m / rows) * (n / 256);
        let (grid, function) = if cluster == 1 {
            (tiles.min(self.sms as usize), &self.function)
        } else {
            (2 * tiles.min(self.clusters as usize), &self.cluster_function)
        };
        let cfg = LaunchConfig::linear(u32::try_from(grid)?, Self::THREADS).with_shared_mem(Self::SHARED_BYTES);
        // A's boxes are 128 rows of one 64-wide k step, B's 64 k-rows of 64 columns (four per 256-column tile).
        let (map_a, map_b) = (TmaMatrix::new(m, k, k, [128, 64])?, TmaMatrix::new(k, n, n, [64, 64])?);
        let mut args = ArgBuffer::new();
        args.push_tma_matrix(a, &map_a, stream)?;
        args.push_tma_matrix(b, &map_b, stream)?;
        let c_arg = args.slice_arg_mut(c, stream)?;
        args.push(c_arg.ptr);
        args.push(m);
        args.push(n);
        args.push(k);
        // SAFETY: the arguments are those of gemm_tma_bf16 and gemm_tma_cluster_bf16 (two tensor maps by value, their
        // __grid_constant__ parameters, then a pointer and three size_t), in order; the shapes meet their
        // preconditions (checked above: m, n, k non-zero multiples of 128 (256 with clusters), 256 and 64, and every
        // tile inside a, b and c), and the maps describe a (m x k) and b (k x n) inside their buffers (push_tma_matrix
        // checked the spans), so TMA reads only inside them; 384 threads, an even grid for clusters of 2, and the dynamic shared memory they need (the
        // attribute set at load). The maps hold a's and b's addresses, which `args` (dropped after the launch)
        // keeps in use until the launch is recorded; the buffers are freed only after the stream settles.
        unsafe { launch_raw(function, stream, &cfg, &mut args)? };
        Ok(())
    }
}
