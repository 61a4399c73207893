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

/// Compiles `source` to a cubin with each NCCL header set (those from `min_nccl` on, if given); panics with nvcc's
/// output on failure.
fn compile(tc: &Toolchain, name: &str, source: &str, min_nccl: Option<&str>) {
    let dir = std::env::temp_dir().join(format!("weft-macros-nvcc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cu = dir.join(format!("{name}.cu"));
    std::fs::write(&cu, source).expect("write .cu");
    let version_key = |v: &str| -> Vec<u32> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    for (version, include) in &tc.nccl {
        if min_nccl.is_some_and(|min| version_key(version) < version_key(min)) {
            continue;
        }
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
    compile_all_from(cases.into_iter().map(|(name, source)| (name.to_string(), source, None)).collect());
}

/// The same, for cases (name, source, oldest NCCL release whose headers have what it uses).
fn compile_all_from(cases: Vec<(String, String, Option<&'static str>)>) {
    let tc = toolchain();
    let queue = Mutex::new(cases);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let Some((name, source, min_nccl)) = queue.lock().unwrap().pop() else { break };
                if let Err(e) = std::panic::catch_unwind(|| compile(&tc, &name, &source, min_nccl)) {
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

/// Every name a user may write reaches C++ mangled (`rs_…`, macros/src/codegen/lower/names.rs): locals, parameters,
/// loop variables, labels, pattern bindings, type parameters, device fns and kernels named like C++ keywords and
/// types (`float`, `int`, `auto`, `class`, `new`, `this`), CUDA and libc macros and builtins (`threadIdx`,
/// `__syncthreads`, `NULL`, `INFINITY`, `EOF`, `assert`, `printf`, `main`), NCCL's and weft's own names (`ncclDevComm`,
/// `weft`, `detail`, `Slice`, `weft_tuple2`, `weft_not`, `min`, `size_t`, `uint32_t`) and the translation's
/// (`i_end`, `matched`, `tuple`, `w_i_end`, `rs_x`), and one that is not ASCII (`café`), all compile, and mean what the Rust says (the kernel returns
/// through `out`, whose values the GPU tests do not need here: nvcc accepting them is the point).
#[test]
fn user_names_that_cpp_uses_compile_with_nvcc() {
    let cases = vec![
        (
            "printf",
            kernel(
                quote!(),
                quote! {
                    fn printf(ncclDevComm: &DevComm<Lsa>, float: &Window<f32>, int: &mut [f32], size_t: usize) {
                        let auto = ncclDevComm.lsa_barrier(Cta, block_idx_x());
                        auto.sync(Cta, Order::Relaxed);
                        let café = 1.0f32;
                        let weft = café;
                        let threadIdx = thread_idx_x();
                        let __syncthreads = 2u32;
                        let NULL = 0usize;
                        let INFINITY = 3.0f32;
                        let EOF = -1i32;
                        let uint32_t = threadIdx + __syncthreads;
                        // Declared only: the macro reads no SCREAMING_CASE name (it would be a Rust constant).
                        let (detail, Slice) = (weft * 2.0, 3.0f32);
                        let class = detail + Slice;
                        let mut new = 0u32;
                        'float: for i_end in 0..ncclDevComm.lsa_size() {
                            let matched = i_end + uint32_t;
                            for tuple in 0..4u32 {
                                if tuple == matched {
                                    continue 'float;
                                }
                                new += tuple;
                            }
                            if matched > 100 {
                                break 'float;
                            }
                        }
                        let w_i_end = match new {
                            0 => 1u32,
                            main if main > 5 => main,
                            _ => 2u32,
                        };
                        for rs_x in grid_stride(size_t) {
                            let this = float.lsa(0)[rs_x];
                            int[rs_x] = this + class + min(weft, 1.0) + (w_i_end as f32);
                        }
                        auto.sync(Cta, Order::Release);
                    }
                },
                &[],
            ),
        ),
        (
            "main",
            kernel(
                quote!(types(f32)),
                quote! {
                    fn main<T: Float>(assert: &[T], weft_tuple2: &mut [T], weft_not: usize) {
                        let T = 1u32;
                        let float = detail(T, 2);
                        let template = namespace::<T>(assert[0]);
                        for operator in grid_stride(weft_not) {
                            weft_tuple2[operator] = template + T::from_f32(float as f32);
                        }
                    }
                },
                &[
                    quote! {
                        fn detail(int: u32, auto: u32) -> u32 {
                            let r#char = int * auto;
                            r#char + 1
                        }
                    },
                    quote! {
                        fn namespace<T: Float>(class: T) -> T {
                            let new = class + class;
                            new
                        }
                    },
                ],
            ),
        ),
    ];
    compile_all(cases);
}

/// A `#[kernel]` or `#[device_fn]` of a UI case, as its macro receives it.
struct UiItem {
    kind: codegen::ast::FnKind,
    attr: TokenStream,
    item: syn::ItemFn,
    /// The item's lines (attributes included).
    lines: (usize, usize),
}

fn ui_items(text: &str) -> Vec<UiItem> {
    use syn::spanned::Spanned;
    let file = syn::parse_file(text).expect("UI case parses");
    let mut out = Vec::new();
    for item in file.items {
        let syn::Item::Fn(f) = item else { continue };
        let lines = (f.span().start().line, f.span().end().line);
        let Some(i) = f
            .attrs
            .iter()
            .position(|a| a.path().segments.last().is_some_and(|s| s.ident == "kernel" || s.ident == "device_fn"))
        else {
            continue;
        };
        let kind = match f.attrs[i].path().segments.last().map(|s| s.ident.to_string()).as_deref() {
            Some("kernel") => codegen::ast::FnKind::Kernel,
            _ => codegen::ast::FnKind::DeviceFn,
        };
        let attr = match &f.attrs[i].meta {
            syn::Meta::List(l) => l.tokens.clone(),
            _ => TokenStream::new(),
        };
        let mut item = f.clone();
        item.attrs.remove(i);
        out.push(UiItem { kind, attr, item, lines });
    }
    out
}

/// The lines of `file_name` where the errors of a `.stderr` snapshot are (their primary spans).
fn error_lines(stderr: &str, file_name: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    let mut in_error = false;
    for line in stderr.lines() {
        if line.starts_with("error") {
            in_error = true;
        } else if in_error && line.trim_start().starts_with("-->") {
            in_error = false;
            let location = line.trim_start().trim_start_matches("-->").trim();
            if let Some(rest) = location.strip_prefix(&format!("tests/ui/{file_name}:")) {
                if let Some(n) = rest.split(':').next().and_then(|n| n.parse().ok()) {
                    lines.push(n);
                }
            }
        }
    }
    lines
}

/// An item the macro translated.
struct Translated {
    name: String,
    kind: codegen::ast::FnKind,
    source: String,
    /// Names of the functions it calls (device fns).
    callees: Vec<String>,
}

fn device_fn<'a>(accepted: &'a [Translated], name: &str) -> Option<&'a Translated> {
    accepted.iter().find(|t| t.name == name && t.kind == codegen::ast::FnKind::DeviceFn)
}

/// Appends the device fn `name` to `out` after the ones it calls (callees first, as C++ needs them); false if one
/// of them is not an accepted device fn.
fn call_order(accepted: &[Translated], name: &str, out: &mut Vec<String>, depth: usize) -> bool {
    let Some(t) = device_fn(accepted, name) else { return false };
    if depth > 16 {
        return false;
    }
    for callee in &t.callees {
        if !out.contains(callee) && !call_order(accepted, callee, out, depth + 1) {
            return false;
        }
    }
    if !out.iter().any(|n| n == name) {
        out.push(name.to_string());
    }
    true
}

/// What the macro makes of one item: `None` if it rejects it; its C++ and the names of the functions it calls.
fn translate(item: &UiItem) -> Option<(String, Vec<String>)> {
    let cx = codegen::ctxt::Ctxt::new();
    let options = Options { line_comments: true };
    let analysis = codegen::analyze(item.kind, item.attr.clone(), &item.item, options, &cx)?;
    if cx.error_count() > 0 {
        return None;
    }
    let callees =
        analysis.lowered.calls.iter().filter_map(|p| p.segments.last()).map(|s| s.ident.to_string()).collect();
    let source = match item.kind {
        codegen::ast::FnKind::Kernel => {
            codegen::cuda::kernel(&analysis.sig, &item.item, &analysis.lowered, analysis.attrs.launch_bounds, &cx)
        }
        codegen::ast::FnKind::DeviceFn => codegen::cuda::device_fn(&analysis.sig, &item.item, &analysis.lowered, &cx),
    };
    Some((source, callees))
}

/// "Accepted means it compiles": every kernel and device fn the UI suite accepts — all of `tests/ui/pass/`, and in
/// the compile-fail cases those the macro accepts and rustc reports nothing in (their `.stderr` has no error
/// there) — is translated and compiled by nvcc with the device fns of its file that it calls. A file's device fns are
/// also compiled on their own.
#[test]
fn every_kernel_the_ui_suite_accepts_compiles_with_nvcc() {
    let ui = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/ui");
    let mut files: Vec<(PathBuf, bool)> = Vec::new();
    for (dir, pass) in [(ui.join("pass"), true), (ui.clone(), false)] {
        for entry in std::fs::read_dir(&dir).expect("tests/ui") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "rs") {
                files.push((path, pass));
            }
        }
    }
    files.sort();
    let mut cases = Vec::new();
    let (mut kernels_from_passes, mut kernels_from_failures) = (0, 0);
    for (path, pass) in &files {
        let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let text = std::fs::read_to_string(path).expect("read UI case");
        let errors = if *pass {
            Vec::new()
        } else {
            let stderr =
                std::fs::read_to_string(path.with_extension("stderr")).expect("a compile-fail case has a .stderr");
            error_lines(&stderr, &file_name)
        };
        let min_nccl = file_name.ends_with("_2_32.rs").then_some("2.32.0");
        let items = ui_items(&text);
        // Accepted: by the macro, and by rustc (no error within the item).
        let mut accepted: Vec<Translated> = Vec::new();
        for item in &items {
            let name = item.item.sig.ident.to_string();
            let translated = translate(item);
            if *pass {
                assert!(translated.is_some(), "the macro rejects `{name}` of the passing case {file_name}");
            }
            let rustc_accepts = !errors.iter().any(|l| (item.lines.0..=item.lines.1).contains(l));
            if let (Some((source, callees)), true) = (translated, rustc_accepts) {
                accepted.push(Translated { name, kind: item.kind, source, callees });
            }
        }
        let mut all_device_fns = Vec::new();
        for t in &accepted {
            if t.kind == codegen::ast::FnKind::DeviceFn {
                call_order(&accepted, &t.name, &mut all_device_fns, 0);
            }
        }
        let sources_of = |names: &[String]| -> String {
            names.iter().filter_map(|n| device_fn(&accepted, n)).map(|t| t.source.as_str()).collect()
        };
        let stem = file_name.trim_end_matches(".rs").to_string();
        if !all_device_fns.is_empty() {
            let source = format!("{}{}", codegen::cuda::header(&stem), sources_of(&all_device_fns));
            cases.push((format!("ui-{stem}-device-fns"), source, min_nccl));
        }
        for Translated { name, kind, source, callees } in &accepted {
            if *kind != codegen::ast::FnKind::Kernel {
                continue;
            }
            // A kernel whose callee is not an accepted device fn of this file did not compile in rustc either.
            let mut needed = Vec::new();
            if !callees.iter().all(|c| call_order(&accepted, c, &mut needed, 0)) {
                assert!(!*pass, "kernel `{name}` of the passing case {file_name} calls an unknown function");
                continue;
            }
            let full = format!("{}{}{}", codegen::cuda::header(name), sources_of(&needed), source);
            cases.push((format!("ui-{stem}-{name}"), full, min_nccl));
            if *pass {
                kernels_from_passes += 1;
            } else {
                kernels_from_failures += 1;
            }
        }
    }
    println!(
        "compiling {kernels_from_passes} kernels of tests/ui/pass and {kernels_from_failures} of compile-fail cases"
    );
    assert!(
        kernels_from_passes >= 10,
        "only {kernels_from_passes} kernels found in tests/ui/pass: is the scan broken?"
    );
    assert!(kernels_from_failures >= 3, "only {kernels_from_failures} accepted kernels found in compile-fail cases");
    compile_all_from(cases);
}
