//! The JIT and `launch` on a real GPU: compile with nvcc against the loaded NCCL's headers, cache, load,
//! pack arguments and launch. Run with `--include-ignored` on a machine with a CUDA GPU, nvcc and NCCL.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::CudaContext;

use super::*;
use crate::launch::{launch_raw, ArgBuffer, LaunchConfig};

/// A stand-in for weft.cuh with just the argument structs of `docs/kernel-abi.md`.
const HEADER: &str = r#"#pragma once
#include <cstddef>
#include <nccl_device.h>
namespace weft {
template <typename T> struct Slice { const T* ptr; size_t len; };
template <typename T> struct SliceMut { T* ptr; size_t len; };
}
"#;

const SOURCE: &str = r#"#include "weft.cuh"
struct alignas(16) Blob { unsigned char bytes[40]; };

extern "C" __global__ void weft_gpu_probe(weft::SliceMut<float> out, weft::Slice<float> in, float scale,
                                          unsigned char tag, Blob blob, size_t n) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n && i < out.len && i < in.len;
         i += (size_t)gridDim.x * blockDim.x) {
        out.ptr[i] = in.ptr[i] * scale + tag + blob.bytes[39];
    }
}

extern "C" __global__ void weft_gpu_fill(weft::SliceMut<float> out, float value) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < out.len; i += (size_t)gridDim.x * blockDim.x) {
        out.ptr[i] = value;
    }
}
"#;

const PROBE: KernelSpec = KernelSpec { name: "weft_gpu_probe", source: SOURCE, entry_point: "weft_gpu_probe" };
const FILL: KernelSpec = KernelSpec { name: "weft_gpu_probe", source: SOURCE, entry_point: "weft_gpu_fill" };

fn registry(cache_dir: &std::path::Path) -> KernelRegistry {
    let toolchain = toolchain().expect("the process toolchain (nvcc + headers of the loaded libnccl)");
    eprintln!(
        "toolchain: nvcc {} at {}; NCCL {} headers at {}",
        toolchain.nvcc_release(),
        toolchain.nvcc.display(),
        toolchain.nccl_version,
        toolchain.nccl_include.display()
    );
    KernelRegistry::new(toolchain.clone(), KernelCache::new(cache_dir), HEADER)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn kernels_compile_cache_load_and_launch_with_packed_arguments() {
    let ctx: Arc<CudaContext> = CudaContext::new(0).expect("CUDA device 0");
    let stream = ctx.new_stream().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let registry = registry(cache.path());

    let started = Instant::now();
    let probe = registry.function(&ctx, &PROBE).unwrap();
    let cold = started.elapsed();
    let started = Instant::now();
    let fill = registry.function(&ctx, &FILL).unwrap();
    let again = registry.function(&ctx, &PROBE).unwrap();
    let warm = started.elapsed() / 2;
    assert_eq!(again.cu_function(), probe.cu_function());
    assert_ne!(fill.cu_function(), probe.cu_function());

    let started = Instant::now();
    let fresh = registry_with_same_cache(cache.path()).function(&ctx, &PROBE).unwrap();
    let disk = started.elapsed();
    eprintln!(
        "cold compile+load {:.2} s; in-process lookup {:.1} µs; new registry (disk hit + load) {:.2} ms",
        cold.as_secs_f64(),
        warm.as_secs_f64() * 1e6,
        disk.as_secs_f64() * 1e3
    );
    assert!(disk < cold, "a disk hit must be faster than a compile");

    let n = 100_000usize;
    let input: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let input = stream.clone_htod(&input).unwrap();
    let mut out = stream.alloc_zeros::<f32>(n).unwrap();
    let mut blob = [0u8; 40];
    blob[39] = 5;
    {
        let mut args = ArgBuffer::new();
        args.push_slice_mut(&mut out, &stream).unwrap();
        args.push_slice(&input, &stream).unwrap();
        args.push(2.0f32);
        args.push(3u8);
        args.push_bytes(&blob, 16).unwrap();
        args.push(n);
        // SAFETY: the arguments follow weft_gpu_probe's parameter list (SliceMut, Slice, float, unsigned char,
        // a 40-byte Blob aligned to 16, size_t); `fresh` was loaded into `ctx`, the context of `stream`;
        // `out` and `input` are borrowed by `args`, which is dropped after the launch, and stay alive until the
        // copy back below synchronizes the stream; the kernel stays within both slices' lengths.
        unsafe { launch_raw(&fresh, &stream, &LaunchConfig::for_elements(n, 256), &mut args) }.unwrap();
    }
    let result = stream.clone_dtoh(&out).unwrap();
    for (i, value) in result.iter().enumerate() {
        assert_eq!(*value, i as f32 * 2.0 + 8.0, "element {i}");
    }

    {
        let mut args = ArgBuffer::new();
        args.push_slice_mut(&mut out, &stream).unwrap();
        args.push(-1.5f32);
        // SAFETY: weft_gpu_fill takes (SliceMut<float>, float); `fill` was loaded into `ctx`; `out` is borrowed by
        // `args` and outlives the synchronizing copy below; the kernel stays within the slice's length.
        unsafe { launch_raw(&fill, &stream, &LaunchConfig::linear(64, 128), &mut args) }.unwrap();
    }
    assert!(stream.clone_dtoh(&out).unwrap().iter().all(|v| *v == -1.5));
}

fn registry_with_same_cache(dir: &std::path::Path) -> KernelRegistry {
    KernelRegistry::new(toolchain().unwrap().clone(), KernelCache::new(dir), HEADER)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_missing_entry_point_is_a_clear_error() {
    let ctx = CudaContext::new(0).expect("CUDA device 0");
    let cache = tempfile::tempdir().unwrap();
    let spec = KernelSpec { entry_point: "no_such_kernel", ..PROBE };
    let text = registry(cache.path()).function(&ctx, &spec).unwrap_err().to_string();
    assert!(text.contains("no entry point `no_such_kernel`") && text.contains("weft bug"), "{text}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn invalid_launch_configs_never_reach_the_driver() {
    let ctx = CudaContext::new(0).expect("CUDA device 0");
    let stream = ctx.new_stream().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let fill = registry(cache.path()).function(&ctx, &FILL).unwrap();
    let mut out = stream.alloc_zeros::<f32>(16).unwrap();
    let mut args = ArgBuffer::new();
    args.push_slice_mut(&mut out, &stream).unwrap();
    args.push(1.0f32);
    // SAFETY: as in the launch above; the configuration is refused before anything is enqueued.
    let err = unsafe { launch_raw(&fill, &stream, &LaunchConfig::linear(1, 2048), &mut args) }.unwrap_err();
    assert!(err.to_string().contains("at most 1024"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_source_at_two_addresses_is_one_module() {
    let ctx = crate::cuda::context(0).expect("CUDA device 0");
    let cache = tempfile::tempdir().unwrap();
    let registry = registry(cache.path());
    let copy: &'static str = String::leak(FILL.source.to_owned());
    assert_ne!(copy.as_ptr(), FILL.source.as_ptr());
    let first = registry.function(&ctx, &FILL).unwrap();
    let second = registry.function(&ctx, &KernelSpec { source: copy, ..FILL }).unwrap();
    assert_eq!(first.cu_function(), second.cu_function(), "the copy must reuse the loaded module");
}
