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
//! FLOP per byte read; docs/gemm.md).

use weft_kit::test_kernels::gemm_tiles;

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaStream};
use half::bf16;
use weft::host::launch::{launch_raw, ArgBuffer};
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
    let mainloop = match weft::host::jit::gemm_mainloop()? {
        weft::host::jit::GemmMainloop::MmaSync => "mma.sync + ldmatrix",
        weft::host::jit::GemmMainloop::Wgmma if ctx.compute_capability()? == (9, 0) => {
            "wgmma m64n128k16, sm_90a (WEFT_GEMM_MAINLOOP=wgmma)"
        }
        weft::host::jit::GemmMainloop::Wgmma => "mma.sync + ldmatrix (WEFT_GEMM_MAINLOOP=wgmma, but no wgmma here)",
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
        // cudarc's default event flags disable timing (`elapsed_ms` is then CUDA_ERROR_INVALID_HANDLE).
        let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let (start, stop) = (ctx.new_event(timed)?, ctx.new_event(timed)?);
        let (mut weft_ms, mut blas_ms) = (Vec::new(), Vec::new());
        for round in 0..rounds + 1 {
            for weft_side in [round % 2 == 0, round % 2 != 0] {
                start.record(&stream)?;
                for _ in 0..repeats {
                    if weft_side {
                        gemm_tiles::launch(&stream, cfg, &a, &b, &mut c_weft, m, n, k)?;
                    } else {
                        weft_kit::blas::gemm(&blas, &a, &b, &mut c_blas, (m, n, k))?;
                    }
                }
                stop.record(&stream)?;
                weft::host::cuda::settle(&stream)?;
                let ms = f64::from(start.elapsed_ms(&stop)?) / repeats as f64;
                // Round 0 warms both up (clocks, cuBLAS's heuristics, the kernel's load).
                if round > 0 {
                    if weft_side { &mut weft_ms } else { &mut blas_ms }.push(ms);
                }
            }
        }
        rows.push(Row { shape: (m, n, k), weft_ms: median(weft_ms), cublas_ms: median(blas_ms), error });
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
    let probe_rounds = if quick { 3 } else { 7 };
    let l2 = read_bandwidth(&ctx, &stream, L2_BYTES, 32, probe_rounds)?;
    let hbm = read_bandwidth(&ctx, &stream, HBM_BYTES, 2, probe_rounds)?;
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
    if let Some(dir) = std::env::var_os("WEFT_BENCH_OUT") {
        std::fs::create_dir_all(&dir)?;
        std::fs::write(std::path::Path::new(&dir).join("gemm.csv"), csv)?;
        std::fs::write(
            std::path::Path::new(&dir).join("l2.csv"),
            format!(
                "l2_bytes_per_s,memory_bytes_per_s,tile_flop_per_byte,tile_bound_tflops\n{l2},{hbm},\
                 {TILE_FLOP_PER_BYTE},{bound}\n"
            ),
        )?;
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

/// Read bandwidth in bytes per second: one wave of `l2_read` over a buffer of `bytes`, `passes` passes per launch,
/// the median of `rounds` launches after one to warm up. A buffer that fits in L2 measures L2 -> SM reads; a larger
/// one, memory -> SM reads.
fn read_bandwidth(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    bytes: usize,
    passes: u32,
    rounds: usize,
) -> Result<f64> {
    let probe = weft_kit::common::Baseline::load(ctx, "l2_read", include_str!("cuda/l2_read.cu"))?;
    let function = probe.function("l2_read")?;
    let cfg = LaunchConfig::one_wave(&function, stream, 512)?;
    let x = stream.alloc_zeros::<u32>(bytes / 4)?;
    let mut out = stream.alloc_zeros::<u32>(usize::try_from(cfg.grid_size() * cfg.block_size())?)?;
    let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    let (start, stop) = (ctx.new_event(timed)?, ctx.new_event(timed)?);
    let mut seconds = Vec::new();
    for round in 0..rounds + 1 {
        start.record(stream)?;
        {
            let mut args = ArgBuffer::new();
            let read = args.slice_arg(&x, stream)?;
            let written = args.slice_arg_mut(&mut out, stream)?;
            args.push(read.ptr);
            args.push(bytes / 16);
            args.push(passes);
            args.push(written.ptr);
            // SAFETY: the arguments are l2_read's (const uint4*, size_t, unsigned, unsigned*), in order; `x` holds
            // bytes / 16 vectors of 16 bytes (cudarc allocations are 256-byte aligned) and `out` one word per
            // thread of `cfg`; both outlive the launch (they are freed after the stream is settled below), and
            // `args` is dropped after the launch, recording the uses.
            unsafe { launch_raw(&function, stream, &cfg, &mut args)? };
        }
        stop.record(stream)?;
        weft::host::cuda::settle(stream)?;
        if round > 0 {
            seconds.push(f64::from(start.elapsed_ms(&stop)?) / 1e3);
        }
    }
    Ok((bytes as f64 * f64::from(passes)) / median(seconds))
}
