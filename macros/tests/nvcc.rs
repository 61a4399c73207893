//! The generated C++ compiles: representative kernels (written here as token streams) are translated and compiled
//! by nvcc to sm_90 cubins against `device/cuda/weft.cuh` and both supported NCCL header sets.
//!
//! Needs `WEFT_NVCC`, `CUDA_HOME` and `WEFT_CODEGEN_NCCL_INCLUDES` (`2.28.9=/abs/include;2.32.3=/abs/include`);
//! `cargo xtask test` provisions and sets them. Without them this test fails: a codegen test that passes without
//! compiling anything proves nothing.

// The translation is plain library code inside the proc-macro crate, which cannot export it; compile it into this
// test directly.
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../src/codegen/mod.rs"]
mod codegen;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use proc_macro2::TokenStream;
use quote::quote;

use codegen::lower::Options;

struct Toolchain {
    nvcc: PathBuf,
    cuda_include: PathBuf,
    nccl: Vec<(String, PathBuf)>,
}

fn toolchain() -> Toolchain {
    let missing = |var: &str| -> ! {
        panic!(
            "{var} is not set: this test compiles generated C++ with nvcc against weft.cuh and the NCCL 2.28.9 and \
             2.32.3 headers. Run it through `cargo xtask test`, which provisions the toolchain and sets WEFT_NVCC, \
             CUDA_HOME and WEFT_CODEGEN_NCCL_INCLUDES (`2.28.9=/abs/include;2.32.3=/abs/include`)."
        )
    };
    let nvcc = std::env::var_os("WEFT_NVCC").unwrap_or_else(|| missing("WEFT_NVCC"));
    let cuda_home = std::env::var_os("CUDA_HOME").unwrap_or_else(|| missing("CUDA_HOME"));
    let includes =
        std::env::var("WEFT_CODEGEN_NCCL_INCLUDES").unwrap_or_else(|_| missing("WEFT_CODEGEN_NCCL_INCLUDES"));
    let nccl: Vec<(String, PathBuf)> = includes
        .split(';')
        .filter(|s| !s.is_empty())
        .map(|entry| {
            let (version, path) = entry
                .split_once('=')
                .unwrap_or_else(|| panic!("WEFT_CODEGEN_NCCL_INCLUDES entry `{entry}` is not `version=/abs/include`"));
            (version.to_string(), PathBuf::from(path))
        })
        .collect();
    for required in ["2.28.9", "2.32.3"] {
        assert!(
            nccl.iter().any(|(v, _)| v == required),
            "WEFT_CODEGEN_NCCL_INCLUDES must name the NCCL {required} headers (got `{includes}`)"
        );
    }
    Toolchain { nvcc: PathBuf::from(nvcc), cuda_include: PathBuf::from(cuda_home).join("include"), nccl }
}

fn weft_cuh_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../device/cuda")
}

fn kernel(attr: TokenStream, item: TokenStream, device_fns: &[TokenStream]) -> String {
    let mut sources = Vec::new();
    for f in device_fns {
        let f: syn::ItemFn = syn::parse2(f.clone()).expect("device fn parses");
        sources.push(
            codegen::generate_device_fn_cuda(TokenStream::new(), &f, Options { line_comments: true })
                .unwrap_or_else(|e| panic!("device fn `{}` did not translate: {e:?}", f.sig.ident)),
        );
    }
    let item: syn::ItemFn = syn::parse2(item).expect("kernel parses");
    codegen::generate_cuda_with(attr, &item, &sources, Options { line_comments: true })
        .unwrap_or_else(|e| panic!("kernel `{}` did not translate: {e:?}", item.sig.ident))
}

/// Compiles `source` to a cubin with each NCCL header set; panics with nvcc's output on failure.
fn compile(tc: &Toolchain, name: &str, source: &str) {
    let dir = std::env::temp_dir().join(format!("weft-macros-nvcc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cu = dir.join(format!("{name}.cu"));
    std::fs::write(&cu, source).expect("write .cu");
    for (version, include) in &tc.nccl {
        let cubin = dir.join(format!("{name}-{version}.cubin"));
        let output = Command::new(&tc.nvcc)
            .args(["-cubin", "-arch=sm_90", "-std=c++17", "--extended-lambda", "--expt-relaxed-constexpr"])
            .arg("-I")
            .arg(weft_cuh_dir())
            .arg("-I")
            .arg(include)
            .arg("-I")
            .arg(&tc.cuda_include)
            .arg("-I")
            .arg(tc.cuda_include.join("cccl"))
            .arg("-o")
            .arg(&cubin)
            .arg(&cu)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", tc.nvcc.display()));
        assert!(
            output.status.success(),
            "nvcc failed on `{name}` with NCCL {version} headers:\n{}\n--- source ({}) ---\n{source}",
            String::from_utf8_lossy(&output.stderr),
            cu.display()
        );
        let size = std::fs::metadata(&cubin).map(|m| m.len()).unwrap_or(0);
        assert!(size > 0, "nvcc produced an empty cubin for `{name}` (NCCL {version})");
    }
}

/// Runs the compiles two at a time (nvcc is slow on NCCL's headers; CI machines have two cores).
fn compile_all(cases: Vec<(&'static str, String)>) {
    let tc = toolchain();
    let queue = Mutex::new(cases);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let Some((name, source)) = queue.lock().unwrap().pop() else { break };
                if let Err(e) = std::panic::catch_unwind(|| compile(&tc, name, &source)) {
                    let msg = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    failures.lock().unwrap().push(msg);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn representative_kernels_compile_with_nvcc() {
    let cases = vec![
        (
            "allreduce_sum",
            kernel(
                quote!(),
                quote! {
                    fn allreduce_sum<T: Float>(dev: &DevComm<Lsa>, x: &Window<T>, out: &mut [T], n: usize) {
                        let bar = dev.lsa_barrier(Cta, block_idx_x());
                        bar.sync(Cta, Order::Relaxed);
                        for i in grid_stride(n) {
                            let mut acc = T::zero();
                            for peer in 0..dev.lsa_size() {
                                acc += x.lsa(peer)[i];
                            }
                            out[i] = acc;
                        }
                        bar.sync(Cta, Order::Release);
                    }
                },
                &[],
            ),
        ),
        (
            "copy_from_peers",
            kernel(
                quote!(),
                quote! {
                    fn copy_from_peers(dev: &DevComm<Lsa>, src: &Window<f32>, staged: &Window<f32>, out: &mut [f32], count: usize) {
                        let rank = dev.lsa_rank();
                        let size = dev.lsa_size();
                        for i in grid_stride(count) {
                            let peer = (rank + 1) % size;
                            out[i] = src.lsa(peer)[i] * 0.5 + src.local()[i];
                        }
                        dev.lsa_reduce_sum(Cta, src, out, count);
                        dev.lsa_reduce_sum_copy(Cta, src, staged, count);
                    }
                },
                &[],
            ),
        ),
        (
            "barrier_round_trip",
            kernel(
                quote!(),
                quote! {
                    fn barrier_round_trip(dev: &DevComm<Lsa>, flags: &mut [u32], rounds: u32) {
                        let bar = dev.lsa_barrier(Cta, 0);
                        let mut round = 0;
                        while round < rounds {
                            bar.arrive(Cta, Order::Release);
                            bar.wait(Cta, Order::Acquire);
                            round += 1;
                        }
                        let result = bar.sync_timeout(Cta, Order::AcqRel, 1_000_000);
                        if thread_idx_x() == 0 {
                            flags[block_idx_x() as usize] = if result.is_ok() { 1 } else { 0 };
                        }
                        bar.end();
                    }
                },
                &[],
            ),
        ),
        (
            "scale_generic",
            kernel(
                quote!(types(f32, bf16, f16, f64)),
                quote! {
                    fn scale_generic<T: Float>(x: &[T], out: &mut [T], alpha: T) {
                        for i in grid_stride(x.len()) {
                            let half = 0.5;
                            let v = x[i] * alpha + half;
                            out[i] = if v > T::zero() { v.sqrt() } else { -v };
                        }
                    }
                },
                &[],
            ),
        ),
        (
            "uses_device_fns",
            kernel(
                quote!(),
                quote! {
                    fn uses_device_fns(x: &[f32], y: &mut [f32], a: f32) {
                        for i in grid_stride(y.len()) {
                            let j = clamp_index(i, x.len());
                            y[i] = axpy(a, x[j], y[i]);
                        }
                    }
                },
                &[
                    quote! {
                        fn axpy<T: Float>(a: T, x: T, y: T) -> T {
                            a * x + y
                        }
                    },
                    quote! {
                        fn clamp_index(i: usize, n: usize) -> usize {
                            if i < n { i } else { n - 1 }
                        }
                    },
                ],
            ),
        ),
        (
            "gin_put_signal",
            kernel(
                quote!(),
                quote! {
                    fn gin_put_signal(dev: &DevComm<LsaGin>, src: &Window<f32>, dst: &Window<f32>, count: usize) {
                        let gin = dev.gin(0);
                        let team = dev.world();
                        let peer = (dev.rank() + 1) % dev.nranks();
                        gin.put(team, peer, dst, src, count, SignalInc(0), CounterInc(1), Cta);
                        gin.wait_signal(Cta, 0, 1);
                        gin.wait_counter(Cta, 1, 1);
                        gin.flush(Cta, Order::Release);
                        let bar = gin.rail_barrier(Cta, block_idx_x());
                        bar.sync(Cta, Order::AcqRel);
                    }
                },
                &[],
            ),
        ),
        (
            "constructs",
            kernel(
                quote!(),
                quote! {
                    fn constructs(out: &mut [u32], vals: &mut [f32], n: u32) {
                        let tid = thread_idx_x();
                        let early = if n < 1000 { n + 1 } else { return; };
                        let head = &vals[..2];
                        let rest = &mut out[1..];
                        rest[0] = early + head.len() as u32;
                        let (a, b) = (tid, 2u32);
                        let t = (a + b, 1.5f32);
                        let s = t.0 * 2;
                        let mut acc = 0;
                        for k in 0..=n {
                            acc += k;
                        }
                        for k in (0..n).step_by(2) {
                            if k % 3 == 0 {
                                continue;
                            }
                            acc ^= k;
                        }
                        for k in (0..n).rev() {
                            acc += k;
                        }
                        'outer: for i in 0..4u32 {
                            for j in 0..4u32 {
                                if i * j > 6 {
                                    break 'outer;
                                }
                                if j == i {
                                    continue 'outer;
                                }
                                acc += i * j;
                            }
                        }
                        let kind = match acc % 4 {
                            0 => 10,
                            1 | 2 => 20,
                            x if x > 100 => x,
                            _ => 30,
                        };
                        let y = if kind > 15 { kind - 15 } else { let z = kind * 2; z + 1 };
                        let mut w: u32 = if acc > 5 { let q = acc / 5; q * q } else { 1 };
                        loop {
                            w += 1;
                            if w > 1000 {
                                break;
                            }
                        }
                        let mut shared = SharedArray::<f32, 128>::new();
                        shared[tid as usize % 128] = vals[0];
                        sync_threads();
                        let f = shared[0] as f64 * 2.0;
                        let small: u8 = 200;
                        let doubled = small / 2 + 1;
                        let m = u32::MAX - s;
                        let neg = -(f as f32);
                        let flag = !(acc > 3);
                        let bits = !acc;
                        atomic_add(&mut out[0], 1, Scope::Device);
                        vals[1] = neg.max(0.0).sqrt();
                        let mut counter = 0;
                        counter += doubled as u32;
                        out[tid as usize] = acc + y + w + m + bits + counter + if flag { 1 } else { 0 } + (f as u32);
                    }
                },
                &[],
            ),
        ),
        (
            "stats_multimem",
            kernel(
                quote!(),
                quote! {
                    fn stats_multimem(dev: &DevComm<LsaMultimem>, w: &Window<f32>, out: &mut [f32], flags: &mut [u32], n: usize) {
                        let mut lo = 0.0f32;
                        let mut hi = 0.0f32;
                        for i in grid_stride(n) {
                            let (a, b) = min_max(w.local()[i], out[i]);
                            lo = lo.min(a);
                            hi = hi.max(b);
                        }
                        let total = warp_reduce_sum(hi - lo);
                        if lane_id() == 0 {
                            atomic_add(&mut out[0], total, Scope::Device);
                        }
                        let bar = dev.lsa_multimem_barrier(Cta, block_idx_x());
                        let status = bar.sync_timeout(Cta, Order::AcqRel, 1_000_000);
                        let code = match status {
                            BarrierResult::Ok => 0,
                            BarrierResult::TimedOut => 1,
                            _ => 2,
                        };
                        flags[block_idx_x() as usize] = code;
                        let mv = dev.lsa_multimem(&w);
                        let i = index_1d();
                        if i < n {
                            out[i] = mv.load_reduce_sum(i);
                        }
                        bar.end();
                    }
                },
                &[quote! {
                    fn min_max(a: f32, b: f32) -> (f32, f32) {
                        if a < b { (a, b) } else { (b, a) }
                    }
                }],
            ),
        ),
        (
            "device_fn_references",
            kernel(
                quote!(),
                quote! {
                    fn device_fn_references(dev: &DevComm<LsaGin>, w: &Window<f32>, out: &mut [f32], n: usize) {
                        let bar = dev.lsa_barrier(Cta, block_idx_x());
                        let mut count = 0u32;
                        for i in grid_stride(n) {
                            out[i] = sum_peers(dev, w, i);
                            bump(&mut count);
                        }
                        sync_on(&bar);
                        signal_next(dev);
                        out[0] += count as f32;
                    }
                },
                &[
                    quote! {
                        fn sum_peers<C: HasLsa, T: Float>(dev: &DevComm<C>, w: &Window<T>, i: usize) -> T {
                            let mut acc = T::zero();
                            for peer in 0..dev.lsa_size() {
                                acc += w.lsa(peer)[i];
                            }
                            acc
                        }
                    },
                    quote! {
                        fn bump(counter: &mut u32) {
                            *counter += 1;
                        }
                    },
                    quote! {
                        fn sync_on(bar: &LsaBarrier<'_, Cta>) {
                            bar.sync(Cta, Order::AcqRel);
                        }
                    },
                    quote! {
                        fn signal_next<C: HasGin>(dev: &DevComm<C>) {
                            let gin = dev.gin(0);
                            gin.signal(dev.world(), (dev.rank() + 1) % dev.nranks(), SignalInc(0), Cta);
                        }
                    },
                ],
            ),
        ),
    ];
    compile_all(cases);
}
