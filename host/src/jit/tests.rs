//! The JIT against the real nvcc and NCCL headers.
//!
//! `cargo xtask test` provisions the toolchain and sets `WEFT_NVCC` (or `CUDA_HOME`) and
//! `WEFT_CODEGEN_NCCL_INCLUDES` (`2.28.9=/abs/include;2.32.3=/abs/include`). Without them these tests fail
//! rather than pass without having compiled anything.

use std::path::PathBuf;
use std::time::Instant;

use super::*;
use crate::version::Version;

const HEADER: &str = "#pragma once\n#include <nccl_device.h>\nnamespace weft { constexpr int probe = 7; }\n";

const PROBE: &str = r#"#include "weft.cuh"
extern "C" __global__ void weft_jit_probe(ncclDevComm dev, int* out) {
    if (threadIdx.x == 0) out[0] = dev.rank + weft::probe;
}
"#;

const NOT_RUN_BY_XTASK: &str = "this test compiles with the real nvcc and NCCL headers: run `cargo xtask test` \
    (or set WEFT_NVCC or CUDA_HOME, and WEFT_CODEGEN_NCCL_INCLUDES='2.28.9=/abs/include;2.32.3=/abs/include')";

/// `"2.28.9=/a;2.32.3=/b"` → `[(2.28.9, /a), (2.32.3, /b)]`.
fn parse_codegen_includes(text: &str) -> Result<Vec<(Version, PathBuf)>, String> {
    text.split(';')
        .filter(|entry| !entry.trim().is_empty())
        .map(|entry| {
            let (version, dir) = entry.split_once('=').ok_or(format!("`{entry}` is not VERSION=DIR"))?;
            let parts: Vec<i32> = version
                .trim()
                .split('.')
                .map(|p| p.parse().map_err(|_| version))
                .collect::<Result<_, _>>()
                .map_err(|v| format!("bad version `{v}`"))?;
            match parts[..] {
                [major, minor, patch] => Ok((Version::new(major, minor, patch), PathBuf::from(dir.trim()))),
                _ => Err(format!("bad version `{version}`")),
            }
        })
        .collect()
}

/// One toolchain per NCCL release the test runner provisioned.
fn real_toolchains() -> Vec<Toolchain> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let nvcc = var("WEFT_NVCC")
        .map(PathBuf::from)
        .or_else(|| var("CUDA_HOME").map(|home| PathBuf::from(home).join("bin").join("nvcc")))
        .unwrap_or_else(|| panic!("neither WEFT_NVCC nor CUDA_HOME is set; {NOT_RUN_BY_XTASK}"));
    let includes = var("WEFT_CODEGEN_NCCL_INCLUDES")
        .unwrap_or_else(|| panic!("WEFT_CODEGEN_NCCL_INCLUDES is not set; {NOT_RUN_BY_XTASK}"));
    let includes = parse_codegen_includes(&includes.to_string_lossy()).expect("WEFT_CODEGEN_NCCL_INCLUDES");
    assert!(!includes.is_empty(), "WEFT_CODEGEN_NCCL_INCLUDES lists no NCCL; {NOT_RUN_BY_XTASK}");
    includes
        .into_iter()
        .map(|(version, dir)| {
            Toolchain::from_paths(&nvcc, dir, Some(version)).unwrap_or_else(|e| panic!("NCCL {version}: {e}"))
        })
        .collect()
}

#[test]
fn codegen_include_lists_parse() {
    let parsed = parse_codegen_includes("2.28.9=/a/include;2.32.3=/b/include;").unwrap();
    assert_eq!(
        parsed,
        vec![
            (Version::new(2, 28, 9), PathBuf::from("/a/include")),
            (Version::new(2, 32, 3), PathBuf::from("/b/include"))
        ]
    );
    assert!(parse_codegen_includes("2.28=/a").is_err());
    assert!(parse_codegen_includes("/a/include").is_err());
}

#[test]
fn real_nvcc_compiles_a_kernel_using_nccl_device_h_for_each_nccl() {
    for tc in real_toolchains() {
        let cache = KernelCache::new(tempfile::tempdir().unwrap().keep());
        let req = CompileRequest::new("weft_jit_probe", PROBE, HEADER, GpuArch::SM_90);
        let compiled = cache.get_or_compile(&tc, &req).unwrap_or_else(|e| panic!("NCCL {}: {e}", tc.nccl_version));
        assert_eq!(compiled.origin, CacheOrigin::Compiled);
        assert!(compiled.cubin.starts_with(b"\x7fELF"), "not an ELF cubin");
        let name = b"weft_jit_probe";
        assert!(compiled.cubin.windows(name.len()).any(|w| w == name), "the entry point is missing from the cubin");
        eprintln!(
            "NCCL {} / nvcc {}: compiled in {:.2} s ({} bytes)",
            tc.nccl_version,
            tc.nvcc_release(),
            compiled.duration.as_secs_f64(),
            compiled.cubin.len()
        );
        std::fs::remove_dir_all(cache.dir()).ok();
    }
}

#[test]
fn a_cold_compile_is_then_a_warm_cache_hit() {
    let tc = real_toolchains().swap_remove(0);
    let dir = tempfile::tempdir().unwrap();
    let source = PROBE.replace("weft::probe", "(weft::probe + 1)");
    let req = CompileRequest::new("weft_jit_probe_warm", &source, HEADER, GpuArch::SM_90);

    let cold = KernelCache::new(dir.path()).get_or_compile(&tc, &req).unwrap();
    assert_eq!(cold.origin, CacheOrigin::Compiled);

    // A new cache object over the same directory is what a second process sees.
    let started = Instant::now();
    let warm_cache = KernelCache::new(dir.path());
    let warm = warm_cache.get_or_compile(&tc, &req).unwrap();
    let warm_time = started.elapsed();
    assert_eq!(warm.origin, CacheOrigin::Disk, "the second compile must be a disk-cache hit");
    assert_eq!(warm.cubin, cold.cubin);

    let started = Instant::now();
    let memo = warm_cache.get_or_compile(&tc, &req).unwrap();
    let memo_time = started.elapsed();
    assert_eq!(memo.origin, CacheOrigin::Memory);
    eprintln!(
        "cold compile {:.2} s; warm disk hit {:.3} ms; in-process hit {:.3} ms",
        cold.duration.as_secs_f64(),
        warm_time.as_secs_f64() * 1e3,
        memo_time.as_secs_f64() * 1e3
    );
    assert!(warm_time < cold.duration, "a cache hit should be faster than nvcc");
}

#[test]
fn real_nvcc_errors_name_the_kernel_and_keep_the_diagnostic() {
    let tc = real_toolchains().swap_remove(0);
    let dir = tempfile::tempdir().unwrap();
    let source = PROBE.replace("dev.rank", "dev.no_such_member");
    let req = CompileRequest::new("weft_jit_broken", &source, HEADER, GpuArch::SM_90);
    let err = KernelCache::new(dir.path()).get_or_compile(&tc, &req).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("`weft_jit_broken`") && text.contains("no_such_member"), "{text}");
    let JitError::CompileFailed { source_path, output, .. } = err else { panic!("{text}") };
    assert_eq!(std::fs::read_to_string(source_path).unwrap(), source);
    assert!(output.contains("error"), "{output}");
}

/// What nvcc really emits passes the ELF check for every NCCL, and the damage the check exists for is caught
/// on the real thing too, not only on the hand-made image of `elf::tests`.
#[test]
fn real_cubins_pass_the_elf_check_and_damaged_ones_do_not() {
    for tc in real_toolchains() {
        let dir = tempfile::tempdir().unwrap();
        let req = CompileRequest::new("weft_jit_probe", PROBE, HEADER, GpuArch::SM_90);
        let compiled = KernelCache::new(dir.path()).get_or_compile(&tc, &req).unwrap();
        let cubin = compiled.cubin.to_vec();
        elf::check_cubin(&cubin).unwrap_or_else(|p| panic!("NCCL {}: a real cubin was refused: {p}", tc.nccl_version));
        assert!(checked_cubin(&compiled).is_ok());

        let shoff = u64::from_le_bytes(cubin[40..48].try_into().unwrap()) as usize;
        let mut wrong_machine = cubin.clone();
        wrong_machine[18..20].copy_from_slice(&62u16.to_le_bytes());
        let mut table_outside = cubin.clone();
        table_outside[40..48].copy_from_slice(&(cubin.len() as u64).to_le_bytes());
        let mut overflowing = cubin.clone();
        overflowing[40..48].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
        let damaged = [
            ("truncated to half", cubin[..cubin.len() / 2].to_vec()),
            ("truncated inside the section table", cubin[..shoff + 100].to_vec()),
            ("wrong machine", wrong_machine),
            ("section table outside", table_outside),
            ("overflowing offset", overflowing),
        ];
        for (what, bytes) in damaged {
            assert!(elf::check_cubin(&bytes).is_err(), "NCCL {}: {what} was accepted", tc.nccl_version);
        }
        let mut altered = compiled.clone();
        altered.cubin = cubin[..cubin.len() / 2].into();
        let err = checked_cubin(&altered).unwrap_err();
        assert!(matches!(err, JitError::MalformedCubin { .. }), "{err}");
    }
}
