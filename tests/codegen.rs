//! Every kernel in tests/ and examples/ is generated and compiled with nvcc to an sm_90 cubin against each
//! NCCL release's headers in `WEFT_CODEGEN_NCCL_INCLUDES` (`cargo xtask test` sets it to 2.28.9 and 2.32.3).

#[path = "../examples/kernels/mod.rs"]
mod example_kernels;
#[path = "kernels/mod.rs"]
mod kernels;

use weft::host::jit::{CompileRequest, GpuArch, KernelCache, Toolchain};

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
    let all: Vec<&(&str, &str)> = kernels::ALL.iter().chain(example_kernels::ALL).collect();
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
        for (name, source) in &all {
            let request = CompileRequest::new(name, source, weft::device::WEFT_CUH, GpuArch::SM_90);
            let kernel = cache
                .get_or_compile(&toolchain, &request)
                .unwrap_or_else(|e| panic!("`{name}` does not compile against NCCL {version}: {e}"));
            assert!(kernel.cubin.len() > 1000, "`{name}`: a {}-byte cubin", kernel.cubin.len());
            compiled += 1;
        }
    }
    println!("{compiled} kernels x NCCL releases compiled");
    assert_eq!(compiled, all.len() * sets.len());
}
