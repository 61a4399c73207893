//! GPU tests of the tensor-core vocabulary (`mma.sync m16n8k16`, device/src/mma.rs, and the block GEMM mainloop,
//! device/src/gemm.rs), one rank: GEMMs written with it (kit's `mma_gemm`, one warp per 16 x 8 tile;
//! `mma_gemm_shared`, through shared tiles and `ldmatrix`; `gemm_tiles`, 128 x 128 block tiles through
//! `gemm_block`) against an f64 host reference in f16 and bf16, a tile that reaches past its buffer stopping the
//! kernel instead of reading beyond it, and `gemm_block` refusing a block of the wrong size; and the persistent TMA
//! loop (`gemm_tma`, `a.gemm_tiles(&b)`: TMA + `wgmma` on Hopper, `cp.async` + `mma.sync` elsewhere or
//! with `WEFT_GEMM_MAINLOOP=mma_sync`) against the same reference.
//! One test runs on every rank of the placement (`WEFT_RANKS`): the all-gather + GEMM on that loop, reading the
//! peers' windows through TMA (`..._on_every_rank`, which `scripts/gpu-check.sh` runs at 2, 4 and 8 ranks).

use weft_kit::test_kernels::{gemm_tiles, gemm_tma, gemm_tma_store, mma_gemm, mma_gemm_shared};

use cudarc::driver::DeviceRepr;
use weft::host::jit::BoundsChecks;
use weft::host::launch::KernelArgs;
use weft::host::{Communicator, Config, DeviceBuffer, Error, LaunchConfig, UniqueId};

fn one_rank() -> Communicator {
    Communicator::init_rank(0, 1, 0, &UniqueId::new().unwrap(), &Config::new()).unwrap()
}

/// Which `gemm_tiles` loop kernels compiled for `s`'s GPU run: TMA + `wgmma` on compute capability 9.0 (unless
/// `WEFT_GEMM_MAINLOOP=mma_sync`), `cp.async` + `mma.sync` elsewhere; `Err` with `gemm_tiles_config`'s reason where
/// the GPU cannot run either (below compute capability 8.0, or too little shared memory per block).
fn gemm_tiles_loop(s: &std::sync::Arc<weft::host::launch::CudaStream>) -> Result<&'static str, String> {
    weft::host::launch::gemm_tiles_config(s, 128, 256).map_err(|e| e.to_string())?;
    weft_kit::common::gemm_tiles_loop(s.context()).map_err(|e| e.to_string())
}

/// `out = a (m x k) * b (k x n)` in f64 from the rounded inputs, row by row (`b` read along its rows: fast enough
/// for the 8-rank shapes).
fn reference(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for (i, row) in out.chunks_mut(n).enumerate() {
        for p in 0..k {
            let x = a[i * k + p];
            for (o, y) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *o += x * y;
            }
        }
    }
    out
}

/// ‖got − want‖ / ‖want‖; every output must have been written (a NaN poison left over fails).
fn frobenius_error(got: impl Iterator<Item = f64>, want: &[f64], (m, n, k): (usize, usize, usize)) -> f64 {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (g, w) in got.zip(want) {
        assert!(g.is_finite(), "{m}x{n}x{k}: an output element was not written");
        diff += (g - w).powi(2);
        norm += w * w;
    }
    (diff / norm).sqrt()
}

fn check<T>(to: fn(f32) -> T, from: fn(T) -> f64)
where
    T: weft::device::MmaElement + DeviceRepr + weft::host::Element,
    T: mma_gemm::Instantiated + mma_gemm_shared::Instantiated,
{
    let comm = one_rank();
    let s = comm.context().new_stream().unwrap();
    for (m, n, k) in [(16, 8, 16), (64, 64, 128), (128, 96, 256)] {
        let a: Vec<T> = weft_kit::common::random(m * k, 1).into_iter().map(to).collect();
        let b: Vec<T> = weft_kit::common::random(k * n, 2).into_iter().map(to).collect();
        let want = reference(
            &a.iter().map(|&v| from(v)).collect::<Vec<_>>(),
            &b.iter().map(|&v| from(v)).collect::<Vec<_>>(),
            m,
            n,
            k,
        );
        let (ad, bd) = (DeviceBuffer::from_host(&s, &a).unwrap(), DeviceBuffer::from_host(&s, &b).unwrap());
        for shared in [false, true] {
            let mut out = DeviceBuffer::from_host(&s, &vec![f32::NAN; m * n]).unwrap();
            if shared {
                // Through shared tiles and ldmatrix: one warp per block.
                mma_gemm_shared::launch(&s, LaunchConfig::linear(8, 32), &ad, &bd, &mut out, m, n, k).unwrap();
            } else {
                mma_gemm::launch(&s, LaunchConfig::linear(4, 128), &ad, &bd, &mut out, m, n, k).unwrap();
            }
            let got = out.copy_to_host().unwrap();
            let error = frobenius_error(got.iter().map(|&g| f64::from(g)), &want, (m, n, k));
            let which = if shared { "mma_gemm_shared (ldmatrix)" } else { "mma_gemm" };
            println!("{which} {} {m}x{n}x{k}: relative error {error:.2e}", <T as weft::device::Element>::NAME);
            // Products of 16-bit inputs are exact in f32; the tensor cores accumulate in (at least nearly) f32. A wrong
            // fragment layout gives errors of order 1.
            assert!(error < 1e-3, "{which} {m}x{n}x{k}: {error}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_tensor_core_gemm_matches_the_host_reference() {
    check::<half::bf16>(half::bf16::from_f32, |v| f64::from(v.to_f32()));
    check::<half::f16>(half::f16::from_f32, |v| f64::from(v.to_f32()));
}

/// Set in the child process of [`a_tile_past_its_buffer_stops_the_kernel`] (a trap leaves the CUDA context
/// unusable, so it happens in a process of its own).
const CHILD: &str = "WEFT_MMA_TEST_CHILD";

/// The child's half: `k` four times what `a`'s rows hold, so the first fragment load's tile check fails.
#[test]
#[ignore = "needs a CUDA GPU; run by a_tile_past_its_buffer_stops_the_kernel in its own process"]
fn tile_check_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let comm = one_rank();
    let s = comm.context().new_stream().unwrap();
    let (m, n, k) = (16, 8, 16);
    let a = DeviceBuffer::from_host(&s, &vec![half::bf16::ONE; m * k]).unwrap();
    let b = DeviceBuffer::from_host(&s, &vec![half::bf16::ONE; k * n]).unwrap();
    let mut out = DeviceBuffer::from_host(&s, &vec![0.0f32; m * n]).unwrap();
    mma_gemm::launch(&s, LaunchConfig::linear(1, 32), &a, &b, &mut out, m, n, 4 * k).unwrap();
    let waited: Result<(), Error> = weft::host::cuda::settle(&s);
    println!("child: wait after the out-of-bounds tile: {waited:?}");
    assert!(waited.is_err(), "the kernel must stop at the out-of-bounds tile");
}

/// Runs test `child` of this binary in a process of its own with `variable` set (a trap leaves the CUDA context
/// unusable), prints what it printed, asserts it exited 0, and returns that text.
fn run_child(child: &str, variable: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new(exe)
        .args(["--exact", child, "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(variable, "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    println!("{text}");
    assert!(output.status.success(), "the child failed:\n{text}");
    text
}

/// `gemm_tma` recorded into a CUDA graph (its tensor maps baked into the graph, over weft `DeviceBuffer`s, whose drops
/// wait for the replays) and replayed with new inputs written between replays, against the f64 reference; a
/// `TmaOperand` over a cudarc buffer is refused while recording, naming the fix. Either loop ([`gemm_tiles_loop`]);
/// skips, saying why, on a GPU that runs neither.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_recorded_tma_gemm_replays_with_new_inputs() {
    use half::bf16;
    use weft::host::launch::{gemm_tiles_config, TmaOperand};
    let comm = one_rank();
    let s = comm.context().new_stream().unwrap();
    let which = match gemm_tiles_loop(&s) {
        Ok(which) => which,
        Err(why) => return println!("skipped: {why}"),
    };
    let (m, n, k) = (256, 512, 128);
    let a = DeviceBuffer::<bf16>::new(&s, m * k).unwrap();
    let b = DeviceBuffer::<bf16>::new(&s, k * n).unwrap();
    let out = DeviceBuffer::<bf16>::new(&s, m * n).unwrap();
    let (ta, tb) = (TmaOperand::gemm_a(&a, m, k, k).unwrap(), TmaOperand::gemm_b(&b, k, n, n).unwrap());
    let cfg = gemm_tiles_config(&s, m, n).unwrap();
    let mut graph = weft::host::Graph::capture(&s, |c| gemm_tma::record(c, cfg, &ta, &tb, &out)).unwrap();
    for round in 0..2u64 {
        let ha: Vec<bf16> = weft_kit::common::random(m * k, 20 + round).into_iter().map(bf16::from_f32).collect();
        let hb: Vec<bf16> = weft_kit::common::random(k * n, 30 + round).into_iter().map(bf16::from_f32).collect();
        graph.write(&a, &ha).unwrap();
        graph.write(&b, &hb).unwrap();
        graph.replay().unwrap();
        let got = graph.read(&out).unwrap();
        let widen = |v: &[bf16]| -> Vec<f64> { v.iter().map(|x| f64::from(x.to_f32())).collect() };
        let want = reference(&widen(&ha), &widen(&hb), m, n, k);
        let error = frobenius_error(got.iter().map(|v| f64::from(v.to_f32())), &want, (m, n, k));
        println!("recorded gemm_tma bf16 {m}x{n}x{k} ({which}), replay {round}: relative error {error:.2e}");
        assert!(error < 1e-2, "replay {round}: {error}");
    }
    drop(graph);
    // cudarc's buffers cannot hold a graph's replays back from their drop: refused while recording.
    let slice = s.alloc_zeros::<bf16>(m * k).unwrap();
    let tc = TmaOperand::gemm_a(&slice, m, k, k).unwrap();
    let err = weft::host::Graph::capture(&s, |c| gemm_tma::record(c, cfg, &tc, &tb, &out)).unwrap_err();
    assert!(err.to_string().contains("make the TmaOperand over a weft DeviceBuffer"), "{err}");
}

/// Set in the child process of [`a_gemm_store_past_its_buffer_stops_the_kernel`].
const STORE_CHILD: &str = "WEFT_MMA_STORE_TEST_CHILD";

/// The child's half: one 128 x 256 tile stored by `gemm_store` into a buffer one row short.
#[test]
#[ignore = "needs a CUDA GPU; run by a_gemm_store_past_its_buffer_stops_the_kernel in its own process"]
fn store_check_child() {
    if std::env::var_os(STORE_CHILD).is_none() {
        return;
    }
    let comm = one_rank();
    let s = comm.context().new_stream().unwrap();
    if let Err(why) = gemm_tiles_loop(&s) {
        return println!("child: skipped: {why}");
    }
    let (m, n, k) = (128, 256, 64);
    let a = DeviceBuffer::from_host(&s, &vec![half::bf16::ONE; m * k]).unwrap();
    let b = DeviceBuffer::from_host(&s, &vec![half::bf16::ONE; k * n]).unwrap();
    let mut out = DeviceBuffer::from_host(&s, &vec![half::bf16::ZERO; (m - 1) * n]).unwrap();
    let (ta, tb) = (
        weft::host::launch::TmaOperand::gemm_a(&a, m, k, k).unwrap(),
        weft::host::launch::TmaOperand::gemm_b(&b, k, n, n).unwrap(),
    );
    let cfg = weft::host::launch::gemm_tiles_config(&s, m, n).unwrap();
    gemm_tma_store::launch(&s, cfg, &ta, &tb, &mut out, 1.0).unwrap();
    let waited: Result<(), Error> = weft::host::cuda::settle(&s);
    println!("child: wait after the short output: {waited:?}");
    assert!(waited.is_err(), "the kernel must stop at the tile past its buffer");
}

/// `out.gemm_store(&gemm, row0, col0, ld)` checks the whole tile against `out` first: a tile past the end stops the
/// kernel with weft's report, and nothing is written beyond the buffer.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_gemm_store_past_its_buffer_stops_the_kernel() {
    let text = run_child("store_check_child", STORE_CHILD);
    if text.contains("child: skipped") {
        return println!("skipped: this GPU runs no gemm_tiles loop (the child says why)");
    }
    assert!(text.contains("wait after the short output: Err"), "{text}");
    // The tile's last row (127) is not below the rows the buffer holds (127).
    assert!(
        text.contains("kernel `gemm_tma_store`") && text.contains("out-of-bounds access: index 127 is not below 127"),
        "the error does not carry the trap report:\n{text}"
    );
}

/// A fragment load whose tile reaches past its buffer stops the kernel with weft's message: nothing is read beyond it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_tile_past_its_buffer_stops_the_kernel() {
    let text = run_child("tile_check_child", CHILD);
    assert!(text.contains("wait after the out-of-bounds tile: Err"), "{text}");
    // The trap report in the error value (host/src/trap.rs): the kernel, the index and the limit.
    assert!(
        text.contains("kernel `mma_gemm` (block (0, 0, 0)")
            && text.contains("out-of-bounds access: index 15 is not below 4"),
        "the error does not carry the trap report:\n{text}"
    );
    // The device's own printf too: `mma_gemm` calls no GEMM mainloop, so it never gets the wgmma form, whose traps
    // print nothing (weft.cuh: WEFT_TRAP_PRINTS; host/src/jit/compile.rs).
    assert!(text.contains("weft: out-of-bounds access at line"), "the tile check's message is missing:\n{text}");
}

/// `gemm_tiles` (the block mainloop: cp.async stages, swizzled shared tiles, ldmatrix, 8 warps of mma.sync) against
/// the f64 host reference, over shapes with one tile, several tiles per block (a grid smaller than the tiles) and
/// k spanning one to many stages.
fn check_block_gemm<T: weft::device::MmaElement + DeviceRepr + weft::host::Element + gemm_tiles::Instantiated>(
    to: fn(f32) -> T,
    from: fn(T) -> f64,
) {
    let comm = one_rank();
    let s = comm.context().new_stream().unwrap();
    for (m, n, k, blocks) in [(128, 128, 32, 1), (256, 384, 96, 6), (384, 256, 512, 2)] {
        let a: Vec<T> = weft_kit::common::random(m * k, 3).into_iter().map(to).collect();
        let b: Vec<T> = weft_kit::common::random(k * n, 4).into_iter().map(to).collect();
        let want = reference(
            &a.iter().map(|&v| from(v)).collect::<Vec<_>>(),
            &b.iter().map(|&v| from(v)).collect::<Vec<_>>(),
            m,
            n,
            k,
        );
        let (ad, bd) = (DeviceBuffer::from_host(&s, &a).unwrap(), DeviceBuffer::from_host(&s, &b).unwrap());
        let mut out = DeviceBuffer::from_host(&s, &vec![to(f32::NAN); m * n]).unwrap();
        gemm_tiles::launch(&s, LaunchConfig::linear(blocks, 256), &ad, &bd, &mut out, m, n, k).unwrap();
        let got = out.copy_to_host().unwrap();
        let error = frobenius_error(got.iter().map(|&g| from(g)), &want, (m, n, k));
        println!(
            "gemm_tiles {} {m}x{n}x{k} on {blocks} blocks: relative error {error:.2e}",
            <T as weft::device::Element>::NAME
        );
        // The output is rounded to 16 bits (relative error up to 2^-8 for bf16); a wrong layout or swizzle gives
        // errors of order 1.
        assert!(error < 1e-2, "gemm_tiles {m}x{n}x{k}: {error}");
    }
}

/// `gemm_tma` (the persistent loop: a producer warpgroup, two consumer warpgroups, 128 x 256 tiles; TMA + `wgmma` or
/// `cp.async` + `mma.sync`, [`gemm_tiles_loop`]) against the f64 host reference: one tile, several tiles per block (a
/// grid smaller than the tiles), `k` from one stage to more than the four stages hold, and a sub-matrix of a wider
/// `a` (`ld` past `k`). Skips, saying why, on a GPU that runs neither loop; checks first that a launch with the wrong
/// block size, or too little shared memory for the GPU's stages, is refused before it runs.
fn check_tma_gemm<
    T: weft::device::MmaElement
        + DeviceRepr
        + weft::host::Element
        + weft::host::launch::TmaElement
        + gemm_tma::Instantiated
        + gemm_tma_store::Instantiated,
>(
    to: fn(f32) -> T,
    from: fn(T) -> f64,
) {
    let comm = one_rank();
    let s = comm.context().new_stream().unwrap();
    let which = match gemm_tiles_loop(&s) {
        Ok(which) => which,
        Err(why) => return println!("skipped: {why}"),
    };
    // (m, n, k, lda, blocks): one tile; 4 tiles on 3 blocks with k past the four stages; 12 tiles on 5 blocks with a
    // of lda 320 (a sub-matrix: the map must skip the columns past k).
    for (m, n, k, lda, blocks) in [(128, 256, 64, 64, 1), (256, 512, 640, 640, 3), (384, 1024, 256, 320, 5)] {
        let a: Vec<T> = weft_kit::common::random(m * lda, 5).into_iter().map(to).collect();
        let b: Vec<T> = weft_kit::common::random(k * n, 6).into_iter().map(to).collect();
        let a_rows: Vec<f64> = (0..m * k).map(|i| from(a[(i / k) * lda + i % k])).collect();
        let want = reference(&a_rows, &b.iter().map(|&v| from(v)).collect::<Vec<_>>(), m, n, k);
        let (ad, bd) = (DeviceBuffer::from_host(&s, &a).unwrap(), DeviceBuffer::from_host(&s, &b).unwrap());
        let mut out = DeviceBuffer::from_host(&s, &vec![to(f32::NAN); m * n]).unwrap();
        let (ta, tb) = (
            weft::host::launch::TmaOperand::gemm_a(&ad, m, k, lda).unwrap(),
            weft::host::launch::TmaOperand::gemm_b(&bd, k, n, n).unwrap(),
        );
        let cfg = weft::host::launch::gemm_tiles_config(&s, m, n).unwrap();
        let err = gemm_tma::launch(&s, LaunchConfig::linear(1, 256), &ta, &tb, &mut out).unwrap_err();
        assert!(matches!(&err, Error::InvalidArgument { argument: "cfg", .. }), "{err}");
        // 384 threads but less shared memory than this GPU's stages (WEFT_GEMM_TILES_STAGES' count, if set): refused
        // too, naming the bytes the stages need.
        let short = LaunchConfig { grid_dim: (1, 1, 1), shared_mem_bytes: cfg.shared_mem_bytes - 8, ..cfg };
        let err = gemm_tma::launch(&s, short, &ta, &tb, &mut out).unwrap_err();
        let needs = format!("{} bytes", cfg.shared_mem_bytes);
        assert!(
            matches!(&err, Error::InvalidArgument { argument: "cfg", problem } if problem.contains(&needs)),
            "{err}"
        );
        let cfg = LaunchConfig { grid_dim: (blocks.min(cfg.grid_dim.0), 1, 1), ..cfg };
        gemm_tma::launch(&s, cfg, &ta, &tb, &mut out).unwrap();
        let got = out.copy_to_host().unwrap();
        let error = frobenius_error(got.iter().map(|&g| from(g)), &want, (m, n, k));
        println!(
            "gemm_tma {} {m}x{n}x{k} (lda {lda}) on {} blocks, {which}: relative error {error:.2e}",
            <T as weft::device::Element>::NAME,
            cfg.grid_dim.0
        );
        assert!(error < 1e-2, "gemm_tma {m}x{n}x{k}: {error}");
        // The same product scaled by 0.5 in place (`set_value`) and written by `out.gemm_store(&gemm, gemm.row0(),
        // gemm.col0(), n)`, paired stores; a halving is exact, so the reference is halved too.
        let mut stored = DeviceBuffer::from_host(&s, &vec![to(f32::NAN); m * n]).unwrap();
        gemm_tma_store::launch(&s, cfg, &ta, &tb, &mut stored, 0.5).unwrap();
        let got = stored.copy_to_host().unwrap();
        let halved: Vec<f64> = want.iter().map(|v| v * 0.5).collect();
        let error = frobenius_error(got.iter().map(|&g| from(g)), &halved, (m, n, k));
        println!("gemm_tma_store {} {m}x{n}x{k}: relative error {error:.2e}", <T as weft::device::Element>::NAME);
        assert!(error < 1e-2, "gemm_tma_store {m}x{n}x{k}: {error}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_tma_gemm_loop_matches_the_host_reference() {
    check_tma_gemm::<half::bf16>(half::bf16::from_f32, |v| f64::from(v.to_f32()));
    check_tma_gemm::<half::f16>(half::f16::from_f32, |v| f64::from(v.to_f32()));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_block_gemm_mainloop_matches_the_host_reference() {
    check_block_gemm::<half::bf16>(half::bf16::from_f32, |v| f64::from(v.to_f32()));
    check_block_gemm::<half::f16>(half::f16::from_f32, |v| f64::from(v.to_f32()));
}

/// Set in the child process of [`a_block_of_the_wrong_size_stops_the_gemm`].
const GEMM_CHILD: &str = "WEFT_GEMM_TEST_CHILD";

/// `a` (128 x 32) and `b` (32 x 128) of ones and a zeroed 128 x 128 `out`, bf16: one block's GEMM.
type Bf16Buffer = DeviceBuffer<half::bf16>;
fn one_block_of_ones(s: &std::sync::Arc<weft::host::launch::CudaStream>) -> (Bf16Buffer, Bf16Buffer, Bf16Buffer) {
    let (m, n, k) = (128, 128, 32);
    let a = DeviceBuffer::from_host(s, &vec![half::bf16::ONE; m * k]).unwrap();
    let b = DeviceBuffer::from_host(s, &vec![half::bf16::ONE; k * n]).unwrap();
    let out = DeviceBuffer::from_host(s, &vec![half::bf16::ZERO; m * n]).unwrap();
    (a, b, out)
}

/// The child's half: `gemm_tiles` launched with 128 threads per block (the mainloop needs 256).
#[test]
#[ignore = "needs a CUDA GPU; run by a_block_of_the_wrong_size_stops_the_gemm in its own process"]
fn gemm_block_size_child() {
    if std::env::var_os(GEMM_CHILD).is_none() {
        return;
    }
    let comm = one_rank();
    let s = comm.context().new_stream().unwrap();
    let (m, n, k): (usize, usize, usize) = (128, 128, 32);
    let (a, b, mut out) = one_block_of_ones(&s);
    // `launch` refuses the block size before launching (a_block_of_the_wrong_size_is_refused_at_launch): past it,
    // through the raw arguments, the mainloop's own check must stop the kernel.
    let spec = gemm_tiles::spec::<half::bf16>();
    let mut args = KernelArgs::with_parameters(spec.name, &["a", "b", "out", "m", "n", "k"], &s);
    args.push_slice("a", &a).unwrap();
    args.push_slice("b", &b).unwrap();
    args.push_slice_mut("out", &mut out).unwrap();
    for (name, value) in [("m", m), ("n", n), ("k", k)] {
        args.push_scalar(name, value);
    }
    // SAFETY: the arguments are the kernel's, in order, and every tile lies inside `a`, `b` and `out` (m = n = 128,
    // k = 32); the wrong block size is what the device check (in every form) stops before shared memory is touched.
    unsafe { args.launch(&spec, LaunchConfig::linear(1, 128), BoundsChecks::On) }.unwrap();
    let waited: Result<(), Error> = weft::host::cuda::settle(&s);
    println!("child: wait after the 128-thread gemm: {waited:?}");
    assert!(waited.is_err(), "the kernel must stop before touching shared memory with the wrong block size");
}

/// `launch` refuses a `gemm_block` kernel with blocks of other than 256 threads before anything runs, with an error
/// naming the fix; the context stays usable (a correct launch follows).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_block_of_the_wrong_size_is_refused_at_launch() {
    let comm = one_rank();
    let s = comm.context().new_stream().unwrap();
    let (m, n, k) = (128, 128, 32);
    let (a, b, mut out) = one_block_of_ones(&s);
    for block in [128, 512] {
        let err = gemm_tiles::launch(&s, LaunchConfig::linear(1, block), &a, &b, &mut out, m, n, k).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument { argument: "cfg", problem } if problem.contains("exactly 256 threads")),
            "{err}"
        );
    }
    gemm_tiles::launch(&s, LaunchConfig::linear(1, 256), &a, &b, &mut out, m, n, k).unwrap();
    let got = out.copy_to_host().unwrap();
    assert!(got.iter().all(|v| v.to_f32() == 32.0), "a 128 x 128 x 32 product of ones is 32 everywhere");
}

/// `gemm_block` in a block of 128 threads stops the kernel with weft's message (its shared stages are laid out for
/// 256), whichever bounds-check form the launch picked.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_block_of_the_wrong_size_stops_the_gemm() {
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new(exe)
        .args(["--exact", "gemm_block_size_child", "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(GEMM_CHILD, "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    println!("{text}");
    assert!(output.status.success(), "the child failed:\n{text}");
    assert!(text.contains("blocks of exactly 256 threads"), "the mainloop's message is missing:\n{text}");
    // In the error value too (host/src/trap.rs): the only place it is with the wgmma mainloop, which prints nothing.
    assert!(
        text.contains("kernel `gemm_tiles` (block")
            && text.contains("gemm_block: launch it with blocks of exactly 256"),
        "the error does not carry the trap report:\n{text}"
    );
}

/// The all-gather + GEMM on the TMA loop (kit's `allgather_gemm_tiles`: `x.gemm_tiles(&w)` over a `TmaShards`, one
/// tensor map per rank's window) on every rank of the placement (`WEFT_RANKS`, else one per GPU): each rank's
/// `all_gather(x) × w` against the f64 reference of every rank's rows times its own weights, at a shard of one
/// 128-row band and of three, a grid smaller than the tiles, and `k` past the four stages, each shape launched twice
/// (the second call's barriers follow the first's, and the first's writes to the same output are overwritten). Shards
/// that are not whole bands, and a matrix past the window's end, are refused on the host. Either loop
/// ([`gemm_tiles_loop`]); skips, saying why, on a GPU that runs neither, or with several ranks on NCCL older than
/// 2.29 (the host cannot learn the peers' addresses there).
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_tma_all_gather_gemm_matches_the_host_reference_on_every_rank() {
    use weft::host::caps::Lsa;
    use weft::host::launch::{gemm_tiles_config_shared, TmaOperand, TmaShards};
    use weft::host::{DevComm, Placement, WindowFlags};
    use weft_kit::kernels::gemm_tp::allgather_gemm_tiles as ag;
    type T = half::bf16;

    let placement = Placement::from_env().expect("WEFT_RANKS");
    println!("{}", placement.describe());
    let nranks = placement.nranks();
    // (rows per rank, n, k, most blocks).
    const SHAPES: [(usize, usize, usize, u32); 3] = [(128, 256, 64, 132), (384, 256, 320, 3), (256, 768, 128, 132)];
    let x_seed = |rank: usize, shape: usize| 700 + 16 * shape as u64 + rank as u64;
    let outcome = weft::host::spmd(placement.devices(), &Config::new(), |comm| {
        let me = comm.rank();
        let s = comm.context().new_stream()?;
        if gemm_tiles_loop(&s).is_err() {
            return Ok(None);
        }
        // Loaded before the first collective setup call (docs/multi-rank.md, "Load before launch").
        ag::function::<T>(comm.context())?;
        let most = gemm_tiles_config_shared(comm, &s, nranks * 384, 768)?;
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&ag::requirements(&most))?;
        let mut results = Vec::new();
        for (index, &(shard, n, k, blocks)) in SHAPES.iter().enumerate() {
            let m = shard * nranks;
            let mut x = comm.alloc_window::<T>(&s, shard * k, WindowFlags::COLL_SYMMETRIC)?;
            x.buffer_mut().copy_from_host(&weft_kit::common::random_as::<T>(shard * k, x_seed(me, index)))?;
            let w = DeviceBuffer::from_host(&s, &weft_kit::common::random_as::<T>(k * n, 800 + me as u64))?;
            let tx = match TmaShards::gemm_a(&x, shard, k, k) {
                Ok(tx) => tx,
                Err(Error::Unsupported { .. }) if nranks > 1 => return Ok(None),
                Err(other) => return Err(other),
            };
            if index == 0 {
                // Not whole bands, and more rows than the window holds: refused before anything is encoded.
                let refused = [TmaShards::gemm_a(&x, 64, k / 2, k / 2), TmaShards::gemm_a(&x, 256, k, k)];
                for refusal in refused {
                    match refusal {
                        Err(Error::InvalidArgument { argument, .. })
                            if argument == "shard_rows" || argument == "buffer" => {}
                        // An error, not a panic: the peers then stop instead of waiting for this rank.
                        other => {
                            return Err(Error::InvalidArgument {
                                argument: "shards",
                                problem: format!("rank {me}: a bad TmaShards was not refused: {other:?}"),
                            })
                        }
                    }
                }
            }
            let tw = TmaOperand::gemm_b(&w, k, n, n)?;
            let cfg = gemm_tiles_config_shared(comm, &s, m, n)?;
            let cfg = LaunchConfig { grid_dim: (cfg.grid_dim.0.min(blocks), 1, 1), ..cfg };
            let mut out = DeviceBuffer::from_host(&s, &vec![T::NAN; m * n])?;
            ag::launch(&s, cfg, &dev, &tx, &tw, &mut out)?;
            ag::launch(&s, cfg, &dev, &tx, &tw, &mut out)?;
            let got = weft::host::cuda::download(&s, &out)?;
            results.push((index, cfg.grid_dim.0, got));
            weft::host::cuda::settle(&s)?;
            drop(tx);
            drop(x);
        }
        weft::host::cuda::settle(&s)?;
        drop(dev);
        Ok(Some((me, results)))
    })
    .unwrap();
    for rank in outcome {
        let Some((me, results)) = rank else {
            println!(
                "skipped: allgather_gemm_tiles needs a GPU that runs gemm_tiles (compute capability 8.0 or newer with \
                 two stages' 97 KB of shared memory per block), and NCCL 2.29+ with several ranks"
            );
            return;
        };
        for (index, blocks, got) in results {
            let (shard, n, k, _) = SHAPES[index];
            let m = shard * nranks;
            let x: Vec<f64> = (0..nranks)
                .flat_map(|r| weft_kit::common::random_as::<T>(shard * k, x_seed(r, index)))
                .map(|v| f64::from(v.to_f32()))
                .collect();
            let w: Vec<f64> = weft_kit::common::random_as::<T>(k * n, 800 + me as u64)
                .into_iter()
                .map(|v| f64::from(v.to_f32()))
                .collect();
            let want = reference(&x, &w, m, n, k);
            let error = frobenius_error(got.iter().map(|v| f64::from(v.to_f32())), &want, (m, n, k));
            println!("rank {me} of {nranks}: allgather_gemm_tiles {m}x{n}x{k} on {blocks} blocks: relative error {error:.2e}");
            assert!(error < 1e-2, "rank {me}: allgather_gemm_tiles {m}x{n}x{k}: {error}");
        }
    }
}
