//! Run-time compilation of generated CUDA C++ with nvcc, the on-disk cubin cache, and module loading.
//!
//! The path of a launch: [`function`] looks the kernel up in the process-wide [`KernelRegistry`]; the first
//! time in a CUDA context it finds the [`Toolchain`] (nvcc, CUDA's headers, the NCCL headers of the loaded
//! libnccl), gets the cubin from the [`KernelCache`] (memory, then disk, then nvcc), and loads it. nvcc rather
//! than NVRTC, because NVRTC cannot compile NCCL's GIN backend headers. `docs/jit.md` describes discovery, the
//! cache layout and every failure.
//!
//! Environment: `WEFT_NVCC`, `CUDA_HOME`, `PATH`, `WEFT_TOOLCHAIN_DIR` (nvcc); `WEFT_NCCL_INCLUDE`, `NCCL_HOME`
//! (NCCL headers); `WEFT_CACHE_DIR` (cache), all searched by [`crate::discovery`]; `WEFT_PRINT_CUDA=1` (print
//! each kernel's source to stderr when this process first needs it).

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, DriverError};

mod cache;
mod compile;
mod elf;
mod error;
mod registry;
mod toolchain;

#[cfg(test)]
mod gpu_tests;
#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod tests;

pub use cache::{CacheKey, KernelCache};
pub use compile::{
    gemm_mainloop, gemm_mainloop_on, gemm_tiles_stages, CacheOrigin, CompileRequest, CompiledKernel, GemmMainloop,
    GpuArch, GEMM_MAINLOOP_ENV, GEMM_TILES_STAGES_ENV,
};
pub use error::JitError;
pub use registry::{ArgAlignment, BoundsChecks, KernelRegistry, KernelSpec};
pub use toolchain::{
    check_nccl_include, find_cuda_include, find_nccl_include, find_nvcc, nvcc_version, parse_nvcc_release, LoadedNccl,
    Toolchain,
};

/// The launch function of `spec` in `ctx` compiled for 16-byte-aligned slice and window arguments (the form every
/// launch on weft or cudarc allocations runs), compiled and loaded on first use (process-wide registry). Its
/// attributes (registers, occupancy) are those of that form.
///
/// A raw launch of it must pass aligned arguments; [`function_for`] with [`ArgAlignment::Any`] takes any.
pub fn function(ctx: &Arc<CudaContext>, spec: &KernelSpec) -> Result<CudaFunction, JitError> {
    KernelRegistry::global().function(ctx, spec)
}

/// The launch function of `spec` in `ctx` compiled in form `alignment`; this is what `#[weft::kernel]` launchers
/// call, with the form their arguments allow. After the first call per context and form it is two map lookups.
pub fn function_for(
    ctx: &Arc<CudaContext>,
    spec: &KernelSpec,
    alignment: ArgAlignment,
) -> Result<CudaFunction, JitError> {
    KernelRegistry::global().function_for(ctx, spec, alignment)
}

/// The launch function of `spec` in `ctx` compiled in form `alignment`, with the device-side checks of the accesses
/// the macro could not prove in bounds when `checks` is [`BoundsChecks::On`] (what a kernel's checked `launch`
/// runs). After the first call per context and form it is two map lookups.
pub fn function_in(
    ctx: &Arc<CudaContext>,
    spec: &KernelSpec,
    alignment: ArgAlignment,
    checks: BoundsChecks,
) -> Result<CudaFunction, JitError> {
    KernelRegistry::global().function_in(ctx, spec, alignment, checks)
}

/// The process-wide toolchain: discovered once, with the NCCL headers checked against the libnccl this process
/// loaded (which is opened here if it is not yet).
pub fn toolchain() -> Result<&'static Toolchain, JitError> {
    static TOOLCHAIN: OnceLock<Toolchain> = OnceLock::new();
    if let Some(toolchain) = TOOLCHAIN.get() {
        return Ok(toolchain);
    }
    let library = crate::sys::library().map_err(|e| JitError::NcclNotLoaded { reason: e.to_string() })?;
    let toolchain = Toolchain::discover(Some(LoadedNccl { library: library.path(), version: library.version() }))?;
    Ok(TOOLCHAIN.get_or_init(|| toolchain))
}

/// The cubin for `req`, through the process-wide [`KernelCache`] (memory, then disk, then nvcc).
pub fn compile_cubin(tc: &Toolchain, req: &CompileRequest<'_>) -> Result<CompiledKernel, JitError> {
    KernelCache::global()?.get_or_compile(tc, req)
}

/// Loads a compiled kernel's cubin into `ctx`, after checking it is a well-formed CUDA ELF image (the driver
/// does not check, and malformed tables can crash it).
pub fn load(ctx: &Arc<CudaContext>, compiled: &CompiledKernel) -> Result<Arc<CudaModule>, JitError> {
    let cubin = checked_cubin(compiled)?;
    let started = Instant::now();
    let module =
        ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin.to_vec())).map_err(|source| JitError::ModuleLoad {
            kernel: compiled.name.clone(),
            arch: compiled.arch.to_string(),
            device: ctx.ordinal(),
            source,
        })?;
    // So that a trap of this kernel says which kernel and why (crate::trap). A diagnostic: the kernel runs without it.
    if let Err(e) = crate::trap::arm(ctx, &module, &compiled.name) {
        tracing::warn!(
            kernel = compiled.name,
            device = ctx.ordinal(),
            "could not arm the trap report ({e}): if this kernel stops itself, weft's error will not say why"
        );
    }
    tracing::debug!(
        "loaded kernel `{}` on device {} in {:.2} ms",
        compiled.name,
        ctx.ordinal(),
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(module)
}

/// `compiled.cubin` if it passes the ELF check, else [`JitError::MalformedCubin`].
fn checked_cubin(compiled: &CompiledKernel) -> Result<&[u8], JitError> {
    elf::check_cubin(&compiled.cubin).map_err(|problem| JitError::MalformedCubin {
        kernel: compiled.name.clone(),
        path: compiled.path.clone(),
        problem,
    })?;
    Ok(&compiled.cubin)
}

/// The entry point `entry_point` of `kernel`'s loaded module.
pub fn load_function(module: &Arc<CudaModule>, kernel: &str, entry_point: &str) -> Result<CudaFunction, JitError> {
    if entry_point.is_empty() || entry_point.contains('\0') {
        // cudarc would panic on the interior NUL.
        return Err(JitError::InvalidEntryPoint { name: entry_point.to_string() });
    }
    module.load_function(entry_point).map_err(|source: DriverError| JitError::EntryPointNotFound {
        kernel: kernel.to_string(),
        entry_point: entry_point.to_string(),
        source,
    })
}
