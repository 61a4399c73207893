//! The JIT's error type.

use std::path::PathBuf;

use crate::version::Version;

/// Everything that can go wrong while finding the toolchain, compiling a kernel, caching the cubin or loading
/// it into a CUDA context.
///
/// Each message says what to change. `weft_host::Error` wraps this type.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum JitError {
    /// No nvcc was found in any of the places weft looks.
    #[error(
        "nvcc not found (looked at: {}); set WEFT_NVCC to the nvcc binary or CUDA_HOME to a CUDA 13 toolkit, \
         or run `cargo xtask provision` in weft's workspace to install one from pip",
        list_paths(searched)
    )]
    NvccNotFound {
        /// Every path that was checked, in order.
        searched: Vec<PathBuf>,
    },

    /// A weft-specific environment variable names a path that cannot be what it should be.
    #[error("{variable} is set to {}, which {problem}; fix it or unset it", path.display())]
    BadEnvironmentPath {
        /// The variable (`WEFT_NVCC`, `WEFT_NCCL_INCLUDE`).
        variable: &'static str,
        /// Its value.
        path: PathBuf,
        /// What is wrong with that path.
        problem: &'static str,
    },

    /// A weft-specific environment variable has a value weft does not know.
    #[error("{variable} is set to `{value}`; use one of {expected}, or unset it")]
    BadEnvironmentValue {
        /// The variable (`WEFT_GEMM_MAINLOOP`).
        variable: &'static str,
        /// Its value.
        value: String,
        /// The values it may take.
        expected: &'static str,
    },

    /// nvcc was found but `nvcc --version` could not be run or failed.
    #[error("could not run `{} --version`: {reason}; set WEFT_NVCC to a working nvcc (it needs gcc on PATH)", nvcc.display())]
    NvccUnusable {
        /// The nvcc that was tried.
        nvcc: PathBuf,
        /// What happened.
        reason: String,
    },

    /// The CUDA headers are not next to nvcc.
    #[error(
        "CUDA headers (cuda_runtime.h) not found next to {} (looked in: {}); set CUDA_HOME to the toolkit root \
         whose include/ matches this nvcc, or WEFT_NVCC to the nvcc inside it",
        nvcc.display(),
        list_paths(searched)
    )]
    CudaIncludeNotFound {
        /// The nvcc in use.
        nvcc: PathBuf,
        /// The directories checked.
        searched: Vec<PathBuf>,
    },

    /// No directory with `nccl.h` was found.
    #[error(
        "NCCL headers (nccl.h) not found (looked in: {}); set WEFT_NCCL_INCLUDE to the include dir of the NCCL \
         whose libnccl is loaded{}",
        list_paths(searched),
        match loaded { Some(v) => format!(" ({v})"), None => String::new() }
    )]
    NcclIncludeNotFound {
        /// The directories checked.
        searched: Vec<PathBuf>,
        /// The version of the loaded libnccl, when known.
        loaded: Option<Version>,
    },

    /// `nccl.h` exists but has no `#define NCCL_VERSION_CODE` line.
    #[error(
        "no `#define NCCL_VERSION_CODE` in {}: is this NCCL's nccl.h? Set WEFT_NCCL_INCLUDE to NCCL's include dir",
        header.display()
    )]
    NcclVersionUnreadable {
        /// The `nccl.h` read.
        header: PathBuf,
    },

    /// The NCCL headers found are not the release of the loaded libnccl.
    #[error(
        "NCCL headers at {} are {headers} but the loaded libnccl is {loaded}: set WEFT_NCCL_INCLUDE (or NCCL_HOME) \
         to the include dir of NCCL {loaded}",
        include_dir.display()
    )]
    NcclVersionMismatch {
        /// The include directory that was found.
        include_dir: PathBuf,
        /// The release its `nccl.h` declares.
        headers: Version,
        /// The release of the libnccl loaded in this process.
        loaded: Version,
    },

    /// The NCCL headers predate the device API that weft kernels are written against.
    #[error(
        "NCCL headers at {} are {version}, which has no device API (nccl_device.h); weft needs NCCL 2.28 or newer: \
         install it (pip install nvidia-nccl-cu13) and point WEFT_NCCL_INCLUDE or NCCL_HOME at it",
        include_dir.display()
    )]
    NcclWithoutDeviceApi {
        /// The include directory that was found.
        include_dir: PathBuf,
        /// The release its `nccl.h` declares.
        version: Version,
    },

    /// The process-wide JIT needed the loaded libnccl's path and version and could not get them.
    #[error(
        "the kernel JIT must match NCCL's headers to the loaded libnccl, but libnccl could not be loaded: {reason}"
    )]
    NcclNotLoaded {
        /// Why the library could not be opened.
        reason: String,
    },

    /// There is no user cache directory to default to.
    #[error("no user cache directory to keep compiled kernels in (is HOME set?); set WEFT_CACHE_DIR to a writable directory")]
    NoCacheDir,

    /// The kernel cache directory (or a directory above it that weft created) belongs to another user or can be
    /// written by group or others, so a cubin read from it could be anyone's code.
    #[error(
        "kernel cache directory {} {problem}; weft will not load kernels from it, since whoever can write it can \
         run code in this process: run `chmod 700 {}` if the directory is yours, or set WEFT_CACHE_DIR to a \
         private directory of your own",
        dir.display(),
        dir.display()
    )]
    CacheDirInsecure {
        /// The offending directory: the cache directory or a weft-made directory above it.
        dir: PathBuf,
        /// What is wrong ("is writable by group or others (mode 777)", "is owned by uid 0, …").
        problem: String,
    },

    /// Reading or writing a file of the kernel cache failed.
    #[error(
        "kernel cache: could not {action} {}: {source}; set WEFT_CACHE_DIR to a writable directory with free space",
        path.display()
    )]
    CacheIo {
        /// What was being done ("create", "write", "rename", …).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// nvcc rejected the generated source (or crashed). The message shows the part of nvcc's output that
    /// matters (from just before the first error); `output` keeps all of it.
    #[error(
        "nvcc failed to compile kernel `{kernel}` ({status}); generated source: {}; full log: {}\n{}",
        source_path.display(),
        log_path.display(),
        super::compile::excerpt(output)
    )]
    CompileFailed {
        /// The kernel's name.
        kernel: String,
        /// The generated `.cu` file nvcc was given (kept for inspection).
        source_path: PathBuf,
        /// The file holding nvcc's complete output.
        log_path: PathBuf,
        /// nvcc's exit status, in words.
        status: String,
        /// nvcc's complete output (stderr, then stdout).
        output: String,
    },

    /// A cubin is not a well-formed CUDA ELF image, so it was not handed to the driver: nvcc reported success
    /// but wrote something else, or a cubin was altered after it was compiled. (A malformed *cache entry* is
    /// not an error: it is recompiled.)
    #[error(
        "the cubin of kernel `{kernel}` is not a valid CUDA ELF image ({problem}); it was not loaded. Kept at {}; \
         if nvcc just wrote it, check that WEFT_NVCC (or CUDA_HOME) names a working CUDA 13 nvcc and that the disk \
         is not full, then retry",
        path.display()
    )]
    MalformedCubin {
        /// The kernel's name.
        kernel: String,
        /// Where the bytes are: nvcc's output kept for inspection, or the cache entry.
        path: PathBuf,
        /// What is wrong with the ELF structure.
        problem: String,
    },

    /// An entry-point name cannot be passed to the driver (it is empty or contains a NUL byte).
    #[error(
        "invalid entry point name {name:?}: it must be a non-empty C identifier (a weft bug if it came from \
         #[weft::kernel])"
    )]
    InvalidEntryPoint {
        /// The offending name.
        name: String,
    },

    /// The CUDA driver refused the cubin.
    #[error(
        "could not load kernel `{kernel}` (compiled for {arch}) on CUDA device {device}: {source}; if the device is \
         not {arch}, the cubin was built for the wrong GPU (clear WEFT_CACHE_DIR and retry)"
    )]
    ModuleLoad {
        /// The kernel's name.
        kernel: String,
        /// The architecture the cubin targets.
        arch: String,
        /// The device ordinal.
        device: usize,
        /// The driver's error.
        #[source]
        source: cudarc::driver::DriverError,
    },

    /// The loaded module lacks the requested entry point.
    #[error(
        "kernel `{kernel}` has no entry point `{entry_point}` ({source}); the generated SOURCE and ENTRY_POINTS \
         disagree, which is a weft bug: please report it with the source printed by WEFT_PRINT_CUDA=1"
    )]
    EntryPointNotFound {
        /// The kernel's name.
        kernel: String,
        /// The `extern "C"` function asked for.
        entry_point: String,
        /// The driver's error.
        #[source]
        source: cudarc::driver::DriverError,
    },

    /// A CUDA driver query the JIT needs failed (the device's compute capability, binding the context).
    #[error("CUDA driver call failed while {action}: {source}")]
    Driver {
        /// What the JIT was doing.
        action: &'static str,
        /// The driver's error.
        #[source]
        source: cudarc::driver::DriverError,
    },
}

fn list_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "nothing".into();
    }
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

/// The same text as `Display`, which already carries every field (NCCL's result code and messages included): a
/// `main` that returns `Result<(), JitError>` prints weft's message, not a dump of the enum.
impl std::fmt::Debug for JitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
