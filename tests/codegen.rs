//! Every kernel in tests/ and examples/ is generated and compiled with nvcc to an sm_90 cubin against each
//! NCCL release's headers in `WEFT_CODEGEN_NCCL_INCLUDES` (`cargo xtask test` sets it to 2.28.9 and 2.32.3), in
//! both forms a launch may pick (16-byte-aligned arguments, any arguments; docs/kernel-abi.md), and a kernel with
//! accesses checked on the device also in the form with those checks (`WEFT_BOUNDS_CHECKS`, docs/macro.md); so is
//! the hand-written CUDA of tests/cuda/.

use weft_kit::kernels as example_kernels;
use weft_kit::kernels::gemm_tp::allgather_gemm_tiles as ag_gemm;
use weft_kit::kernels::gemm_tp::gemm_tiles_reduce_scatter as gemm_rs;
use weft_kit::test_kernels as kernels;

use std::path::Path;
use weft::host::jit::{ArgAlignment, BoundsChecks, CompileRequest, GemmMainloop, GpuArch, KernelCache, Toolchain};

/// CUDA C++ written by hand against `weft.cuh` (GPU tests that need what the Rust vocabulary does not offer).
const HAND_WRITTEN: &[(&str, &str)] = &[("phantom_peer_wait", include_str!("cuda/phantom_peer_wait.cu"))];

fn include_sets() -> Vec<(String, String)> {
    let spec = std::env::var("WEFT_CODEGEN_NCCL_INCLUDES")
        .expect("WEFT_CODEGEN_NCCL_INCLUDES is not set: run the tests through `cargo xtask test`");
    spec.split(';')
        .filter(|s| !s.is_empty())
        .map(|entry| {
            let (version, dir) = entry.split_once('=').expect("entries are VERSION=DIR");
            (version.to_owned(), dir.to_owned())
        })
        .collect()
}

#[test]
fn every_kernel_compiles_for_sm90_against_each_nccl_release() {
    let nvcc = std::env::var("WEFT_NVCC").expect("WEFT_NVCC is not set: run the tests through `cargo xtask test`");
    let sets = include_sets();
    assert!(!sets.is_empty(), "WEFT_CODEGEN_NCCL_INCLUDES names no NCCL release");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = KernelCache::new(cache_dir.path());
    let all: Vec<&(&str, &str)> = kernels::ALL.iter().chain(example_kernels::ALL).chain(HAND_WRITTEN).collect();
    if let Some(dir) = std::env::var_os("WEFT_CODEGEN_DUMP") {
        // For reading the generated C++: one .cu file per kernel.
        std::fs::create_dir_all(&dir).unwrap();
        for (name, source) in &all {
            std::fs::write(std::path::Path::new(&dir).join(format!("{name}.cu")), source).unwrap();
        }
    }
    let mut compiled = 0;
    for (version, include) in &sets {
        let toolchain = Toolchain::from_paths(&nvcc, include, None).unwrap();
        assert_eq!(toolchain.nccl_version.to_string(), *version, "{include} holds another NCCL release");
        // One thread per alignment form: two nvcc processes at a time.
        compiled += std::thread::scope(|scope| {
            let forms = [ArgAlignment::Aligned16, ArgAlignment::Any].map(|form| {
                let (toolchain, cache, all) = (&toolchain, &cache, &all);
                scope.spawn(move || {
                    let mut compiled = 0;
                    for (name, source) in all {
                        // The checked form differs only where the source has a checked access.
                        let checks: &[BoundsChecks] = if has_device_checks(source) && form == ArgAlignment::Aligned16 {
                            &[BoundsChecks::Off, BoundsChecks::On]
                        } else {
                            &[BoundsChecks::Off]
                        };
                        for &check in checks {
                            let request = CompileRequest::new(name, source, weft::device::WEFT_CUH, GpuArch::SM_90)
                                .with_flags(form.flags_with(check))
                                .with_gemm_mainloop(GemmMainloop::MmaSync);
                            let kernel = cache.get_or_compile(toolchain, &request).unwrap_or_else(|e| {
                                panic!("`{name}` ({form:?}, {check:?}) does not compile against NCCL {version}: {e}")
                            });
                            assert!(kernel.cubin.len() > 1000, "`{name}`: a {}-byte cubin", kernel.cubin.len());
                            compiled += 1;
                        }
                    }
                    compiled
                })
            });
            forms.into_iter().map(|form| form.join().unwrap()).sum::<usize>()
        });
    }
    let checked = all.iter().filter(|(_, source)| has_device_checks(source)).count();
    println!("{compiled} kernels x NCCL releases x argument forms (+ {checked} with device checks) compiled");
    assert!(checked > 0, "some kernel (the MoE kernels, `gather`) has accesses checked on the device");
    assert_eq!(compiled, (all.len() * 2 + checked) * sets.len());
}

/// Whether a kernel's C++ has an access the macro emitted through a `weft::detail::*_at` check.
fn has_device_checks(source: &str) -> bool {
    source.match_indices("weft::detail::").any(|(at, _)| {
        let rest = &source[at + "weft::detail::".len()..];
        rest.split(['(', '<']).next().is_some_and(|name| name.ends_with("_at") || name == "at")
    })
}

/// Left to the default (no `WEFT_GEMM_MAINLOOP`), a Hopper compile gives the `wgmma` form to exactly the kernels that
/// run a GEMM mainloop (`gemm_block` or `gemm_tiles`), and to no other: the rest keep their form and their printing
/// traps. The list is written out, so a change in what the macro emits for a GEMM call cannot drop the form silently.
#[test]
fn by_default_hopper_gives_the_wgmma_form_to_the_gemm_kernels_only() {
    if std::env::var("WEFT_GEMM_MAINLOOP").is_ok() {
        return println!("skipped: WEFT_GEMM_MAINLOOP is set, and this test checks the default");
    }
    const GEMM: &[&str] = &[
        "gemm_tiles",
        "gemm_tma",
        "gemm_tma_store",
        "allgather_gemm",
        "gemm_reduce_scatter",
        "gemm_tiles_reduce_scatter",
        "allgather_gemm_tiles",
    ];
    let mut seen = Vec::new();
    let extra = [(ag_gemm::NAME, ag_gemm::SOURCE)];
    for (name, source) in kernels::ALL.iter().chain(example_kernels::ALL).chain(&extra) {
        let flags = CompileRequest::new(name, source, weft::device::WEFT_CUH, GpuArch::SM_90).flags();
        let wgmma = flags.iter().any(|f| f == "-DWEFT_GEMM_WGMMA=1");
        assert_eq!(wgmma, GEMM.contains(name), "`{name}`: {flags:?}");
        let ampere =
            CompileRequest::new(name, source, weft::device::WEFT_CUH, GpuArch::from_compute_capability((8, 0)));
        assert!(!ampere.flags().iter().any(|f| f == "-DWEFT_GEMM_WGMMA=1"), "`{name}` on sm_80");
        if wgmma {
            seen.push(*name);
        }
    }
    seen.sort_unstable();
    let mut expected = GEMM.to_vec();
    expected.sort_unstable();
    assert_eq!(seen, expected, "every GEMM kernel is among the generated ones");
}

/// The kernels built on `gemm_block` also compile with the `wgmma` mainloop (sm_90a: Hopper's default), in every
/// form, against each NCCL release.
#[test]
fn the_gemm_kernels_compile_with_the_wgmma_mainloop() {
    let nvcc = std::env::var("WEFT_NVCC").expect("WEFT_NVCC is not set: run the tests through `cargo xtask test`");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = KernelCache::new(cache_dir.path());
    let gemm: Vec<&(&str, &str)> =
        kernels::ALL.iter().chain(example_kernels::ALL).filter(|(_, source)| source.contains("gemm_block")).collect();
    assert!(gemm.len() >= 3, "gemm_tiles, allgather_gemm and gemm_reduce_scatter use gemm_block: {}", gemm.len());
    for (version, include) in include_sets() {
        let toolchain = Toolchain::from_paths(&nvcc, &include, None).unwrap();
        for (name, source) in &gemm {
            for check in [BoundsChecks::Off, BoundsChecks::On] {
                let request = CompileRequest::new(name, source, weft::device::WEFT_CUH, GpuArch::SM_90)
                    .with_flags(ArgAlignment::Aligned16.flags_with(check))
                    .with_gemm_mainloop(GemmMainloop::Wgmma);
                assert!(request.flags().iter().any(|f| f == "-arch=sm_90a"), "{:?}", request.flags());
                let kernel = cache.get_or_compile(&toolchain, &request).unwrap_or_else(|e| {
                    panic!("`{name}` ({check:?}) does not compile with wgmma against NCCL {version}: {e}")
                });
                assert!(kernel.cubin.len() > 1000, "`{name}`: a {}-byte cubin", kernel.cubin.len());
            }
        }
    }
}

/// The wgmma form keeps its MMAs asynchronous: ptxas serializes every `wgmma` of a kernel that makes a function call
/// in which the MMA pipeline could be in flight (its note C7510), which a `printf` in the kernel's trap paths used to
/// cause. Both bounds-check forms of each `gemm_block` kernel, against the first NCCL header set.
#[test]
fn the_wgmma_form_of_the_gemm_kernels_is_not_serialized_by_ptxas() {
    let ptxas = Ptxas::new();
    let gemm: Vec<&(&str, &str)> =
        kernels::ALL.iter().chain(example_kernels::ALL).filter(|(_, source)| source.contains("gemm_block")).collect();
    for (name, source) in &gemm {
        for check in [BoundsChecks::Off, BoundsChecks::On] {
            let text = ptxas.compile(name, source, Some(check));
            assert!(text.contains("Used"), "ptxas -v printed no resource usage for `{name}`:\n{text}");
            assert_no_stack(&text, name, check);
            assert!(
                !text.contains("C7510") && !text.contains("serialized"),
                "ptxas serializes the wgmma of `{name}` ({check:?}):\n{text}"
            );
        }
    }
}

/// weft's own TMA GEMM (`a.gemm_tiles(&b)`: kit's `gemm_tma` with its epilogue written in the kernel, `gemm_tma_store`
/// with the tile stored whole, the GEMM + reduce-scatter `gemm_tiles_reduce_scatter` and the all-gather + GEMM
/// `allgather_gemm_tiles`, whose left operand is every rank's shard through a map each) compiles for
/// sm_90a in both bounds-check forms without spills, without ptxas serializing its `wgmma` (C7510, C7518), and with
/// the producer's registers handed to the consumers (ptxas ignores `setmaxnreg` when the producer's path could reach
/// the consumers' code: C7507).
#[test]
fn the_tma_gemm_loop_compiles_for_sm90a_without_spills_serialized_mmas_or_ignored_setmaxnreg() {
    let ptxas = Ptxas::new();
    for (name, source, check) in [
        (kernels::gemm_tma::NAME, kernels::gemm_tma::SOURCE, BoundsChecks::Off),
        (kernels::gemm_tma::NAME, kernels::gemm_tma::SOURCE, BoundsChecks::On),
        (kernels::gemm_tma_store::NAME, kernels::gemm_tma_store::SOURCE, BoundsChecks::Off),
        (kernels::gemm_tma_store::NAME, kernels::gemm_tma_store::SOURCE, BoundsChecks::On),
        (gemm_rs::NAME, gemm_rs::SOURCE, BoundsChecks::Off),
        (gemm_rs::NAME, gemm_rs::SOURCE, BoundsChecks::On),
        (ag_gemm::NAME, ag_gemm::SOURCE, BoundsChecks::Off),
        (ag_gemm::NAME, ag_gemm::SOURCE, BoundsChecks::On),
    ] {
        assert!(
            source.contains("const __grid_constant__ weft::TmaMatrix<"),
            "the maps must stay in parameter space:\n{source}"
        );
        assert!(
            name != ag_gemm::NAME || source.contains("const __grid_constant__ weft::TmaShards<"),
            "the shards' maps must stay in parameter space:\n{source}"
        );
        let text = ptxas.compile(name, source, Some(check));
        assert!(text.contains("0 bytes spill stores, 0 bytes spill loads"), "`{name}` ({check:?}) spills:\n{text}");
        // The epilogue's `while i < gemm.len()` is unrolled (`#pragma unroll`): rolled, its `gemm.value(i)` put the
        // accumulator in local memory (616 bytes of stack), which cost about 45 µs per tile on an H100.
        assert_no_stack(&text, name, check);
        for note in ["C7510", "C7518", "C7507", "serialized"] {
            assert!(!text.contains(note), "`{name}` ({check:?}): ptxas says {note}:\n{text}");
        }
    }
}

/// On GPUs without TMA and `wgmma` (Ampere's sm_80, Ada's sm_89) and in the `mma.sync` build of Hopper (sm_90), a
/// kernel that opens `gemm_tiles` compiles to the `cp.async` + `mma.sync` loop: 384 threads of at most 168 registers
/// (Hopper's sm_90a gives the consumers 224 with `setmaxnreg`) hold the consumers' 128 accumulators and their
/// fragments, so this checks that ptxas keeps them in registers, in both bounds-check forms.
#[test]
fn the_tma_gemm_loop_compiles_to_mma_sync_with_its_accumulators_in_registers_where_there_is_no_wgmma() {
    assert_eq!(spill_stores("    96 bytes stack frame, 104 bytes spill stores, 116 bytes spill loads\n"), 104);
    let ptxas = Ptxas::new();
    for (name, source) in [
        (kernels::gemm_tma::NAME, kernels::gemm_tma::SOURCE),
        (kernels::gemm_tma_store::NAME, kernels::gemm_tma_store::SOURCE),
        (gemm_rs::NAME, gemm_rs::SOURCE),
        (ag_gemm::NAME, ag_gemm::SOURCE),
    ] {
        for arch in [GpuArch { major: 8, minor: 0 }, GpuArch { major: 8, minor: 9 }, GpuArch::SM_90] {
            for check in [BoundsChecks::Off, BoundsChecks::On] {
                let request = CompileRequest::new(name, source, weft::device::WEFT_CUH, arch)
                    .with_flags(ArgAlignment::Aligned16.flags_with(check))
                    .with_gemm_mainloop(GemmMainloop::MmaSync);
                let path = ptxas.dir.path().join(format!("{name}_{arch}_{check:?}.cu"));
                std::fs::write(&path, source).unwrap();
                let (compiled, text) = ptxas_report(&ptxas.toolchain, ptxas.dir.path(), &path, &request);
                assert!(compiled, "`{name}` does not compile for {arch} with the mma.sync mainloop:\n{text}");
                // The mainloop keeps its 128 accumulators and fragments in registers; what spills (under 200 bytes a
                // thread, on 2026-12-05) is the epilogue's row addresses, once per tile. Accumulators in local memory
                // would be 512 bytes and more.
                let most = spill_stores(&text);
                assert!(most < 512, "`{name}` ({arch}, {check:?}) spills {most} bytes with the mma.sync loop:\n{text}");
            }
        }
    }
}

/// The GEMM benchmark's hand-written experiments, the 128 × 256-tile `wgmma` mainloop (benches/cuda/gemm_wide.cu) and
/// the TMA + mbarrier pipeline around the same tile (benches/cuda/gemm_tma.cu), compile for sm_90a as the benchmark
/// compiles them, without spills and without ptxas serializing their `wgmma`.
#[test]
fn the_gemm_experiments_compile_for_sm90a_without_spills_or_serialized_mmas() {
    let ptxas = Ptxas::new();
    for (name, source) in [
        ("gemm_wide", include_str!("../benches/cuda/gemm_wide.cu")),
        ("gemm_tma", include_str!("../benches/cuda/gemm_tma.cu")),
    ] {
        let text = ptxas.compile(name, source, None);
        assert!(text.contains("0 bytes spill stores, 0 bytes spill loads"), "{name}.cu spills:\n{text}");
        assert!(
            !text.contains("C7510") && !text.contains("serialized"),
            "ptxas serializes the wgmma of {name}.cu:\n{text}"
        );
    }
}

/// The most bytes of spill stores ptxas reports for any function of a compilation.
fn spill_stores(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split(" bytes spill stores").next().filter(|_| l.contains(" bytes spill stores")))
        .filter_map(|head| head.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()))
        .max()
        .unwrap_or(0)
}

/// Every function ptxas reports has an empty stack frame: a thread's tile values indexed by a loop that stayed rolled
/// live in local memory instead of registers.
fn assert_no_stack(text: &str, name: &str, check: BoundsChecks) {
    let frames: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("bytes stack frame"))
        .filter(|l| !l.trim_start().starts_with("0 bytes"))
        .collect();
    assert!(text.contains("bytes stack frame"), "ptxas -v printed no stack frame for `{name}`:\n{text}");
    assert!(frames.is_empty(), "`{name}` ({check:?}) keeps values on the stack: {frames:?}\n{text}");
}

/// nvcc with `-Xptxas -v` for the `wgmma` tests: the toolchain against the first NCCL header set, and a directory
/// holding weft.cuh and the sources.
struct Ptxas {
    toolchain: Toolchain,
    version: String,
    dir: tempfile::TempDir,
}

impl Ptxas {
    fn new() -> Ptxas {
        let nvcc = std::env::var("WEFT_NVCC").expect("WEFT_NVCC is not set: run the tests through `cargo xtask test`");
        let (version, include) = include_sets().into_iter().next().expect("an NCCL header set");
        let toolchain = Toolchain::from_paths(&nvcc, &include, None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(weft::device::WEFT_CUH_NAME), weft::device::WEFT_CUH).unwrap();
        Ptxas { toolchain, version, dir }
    }

    /// Compiles `source` for sm_90a with the `wgmma` mainloop (in bounds-check form `check`, for a generated kernel;
    /// `None`: a hand-written source, as the benchmark compiles it), asserts that it compiled, and returns what nvcc
    /// and ptxas printed.
    fn compile(&self, name: &str, source: &str, check: Option<BoundsChecks>) -> String {
        let path = self.dir.path().join(format!("{name}.cu"));
        std::fs::write(&path, source).unwrap();
        let mut request = CompileRequest::new(name, source, weft::device::WEFT_CUH, GpuArch::SM_90);
        if let Some(check) = check {
            request = request.with_flags(ArgAlignment::Aligned16.flags_with(check));
        }
        let request = request.with_gemm_mainloop(GemmMainloop::Wgmma);
        let (compiled, text) = ptxas_report(&self.toolchain, self.dir.path(), &path, &request);
        assert!(compiled, "`{name}` ({check:?}, NCCL {}) did not compile:\n{text}", self.version);
        text
    }
}

/// Compiles `path` as `request` says with `-Xptxas -v` (headers from `dir`, NCCL's and CUDA's): whether it
/// compiled, and everything nvcc and ptxas printed.
fn ptxas_report(toolchain: &Toolchain, dir: &Path, path: &Path, request: &CompileRequest<'_>) -> (bool, String) {
    let mut command = std::process::Command::new(&toolchain.nvcc);
    command.args(request.flags()).args(["-Xptxas", "-v"]);
    for include in [Some(dir), Some(toolchain.nccl_include.as_path()), Some(toolchain.cuda_include.as_path())]
        .into_iter()
        .chain([toolchain.cccl_include.as_deref()])
        .flatten()
    {
        command.arg(format!("-I{}", include.display()));
    }
    let output = command.arg(path).arg("-o").arg(path.with_extension("cubin")).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}
