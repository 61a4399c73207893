//! Finding nvcc, the CUDA headers next to it, and the NCCL headers that belong to the loaded libnccl.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::JitError;
use crate::discovery::{Candidate, Environment, Missing};
use crate::version::{Version, DEVICE_API};

/// The compiler and header directories kernels are built with.
///
/// Build one with [`Toolchain::discover`] (what the process-wide JIT does) or, when the paths are known,
/// [`Toolchain::from_paths`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Toolchain {
    /// The nvcc binary.
    pub nvcc: PathBuf,
    /// The complete output of `nvcc --version` (part of every cache key).
    pub nvcc_version: String,
    /// CUDA's include directory (holds `cuda_runtime.h`).
    pub cuda_include: PathBuf,
    /// `<cuda_include>/cccl` when it exists (the pip wheels keep libcu++ and CUB there).
    pub cccl_include: Option<PathBuf>,
    /// NCCL's include directory (holds `nccl.h` and `nccl_device.h`).
    pub nccl_include: PathBuf,
    /// The release the NCCL headers declare (`NCCL_VERSION_CODE`).
    pub nccl_version: Version,
}

/// The libnccl a process has loaded: where it is and which release it reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadedNccl<'a> {
    /// The shared library's path (`…/nvidia/nccl/lib/libnccl.so.2` for the pip wheel).
    pub library: &'a Path,
    /// What `ncclGetVersion` reports.
    pub version: Version,
}

impl Toolchain {
    /// Finds nvcc and the headers in this process's environment ([`crate::discovery`]), checking the NCCL
    /// headers against `loaded` when given.
    ///
    /// nvcc: `WEFT_NVCC`, `CUDA_HOME/bin/nvcc`, `PATH`, the toolchain `cargo xtask` provisions
    /// (`WEFT_TOOLCHAIN_DIR`, default `<workspace>/target/weft-toolchain`), `/usr/local/cuda/bin/nvcc`.
    /// NCCL headers: `WEFT_NCCL_INCLUDE`, `NCCL_HOME/include`, the `include/` beside the loaded library's
    /// `lib/`, `/usr/include`. The first directory holding `nccl.h` is used; its `NCCL_VERSION_CODE` must equal
    /// `loaded.version`.
    pub fn discover(loaded: Option<LoadedNccl<'_>>) -> Result<Toolchain, JitError> {
        Toolchain::discover_in(&Environment::from_process(), loaded)
    }

    /// [`Toolchain::discover`] in the environment `env`.
    pub fn discover_in(env: &Environment, loaded: Option<LoadedNccl<'_>>) -> Result<Toolchain, JitError> {
        let nvcc = find_nvcc(env)?.path;
        let nccl_include = find_nccl_include(env, loaded)?.path;
        let toolchain = Toolchain::from_paths(nvcc, nccl_include, loaded.map(|l| l.version))?;
        tracing::debug!(
            nvcc = %toolchain.nvcc.display(),
            nvcc_release = toolchain.nvcc_release(),
            nccl_include = %toolchain.nccl_include.display(),
            nccl = %toolchain.nccl_version,
            "found the kernel toolchain"
        );
        Ok(toolchain)
    }

    /// A toolchain from known paths: runs `nvcc --version`, finds CUDA's headers next to nvcc and reads the
    /// NCCL release from `<nccl_include>/nccl.h`, which must equal `expected_nccl` when given.
    pub fn from_paths(
        nvcc: impl Into<PathBuf>,
        nccl_include: impl Into<PathBuf>,
        expected_nccl: Option<Version>,
    ) -> Result<Toolchain, JitError> {
        let nvcc = nvcc.into();
        let nccl_include = nccl_include.into();
        let cuda_include = find_cuda_include(&nvcc)?;
        let cccl = cuda_include.join("cccl");
        let cccl_include = cccl.is_dir().then_some(cccl);
        let nccl_version = check_nccl_include(&nccl_include, expected_nccl)?;
        let nvcc_version = nvcc_version(&nvcc)?;
        Ok(Toolchain { nvcc, nvcc_version, cuda_include, cccl_include, nccl_include, nccl_version })
    }

    /// The nvcc release, `"13.0.88"`, parsed from [`Toolchain::nvcc_version`] (the whole text when it has no
    /// `release …, V…` line).
    pub fn nvcc_release(&self) -> &str {
        parse_nvcc_release(&self.nvcc_version).unwrap_or(self.nvcc_version.trim())
    }
}

/// [`Environment::nvcc`], failing with the error the JIT reports.
pub fn find_nvcc(env: &Environment) -> Result<Candidate, JitError> {
    env.nvcc().map_err(|missing| match missing {
        Missing::BadOverride { variable, path, problem } => JitError::BadEnvironmentPath { variable, path, problem },
        Missing::NotFound { searched } => JitError::NvccNotFound { searched },
    })
}

/// CUDA's include directory for `nvcc`: `../include` beside it, first as given, then with symlinks resolved
/// (`/usr/bin/nvcc` → a toolkit); it must hold `cuda_runtime.h`.
pub fn find_cuda_include(nvcc: &Path) -> Result<PathBuf, JitError> {
    let beside = |bin: &Path| bin.parent().and_then(Path::parent).map(|root| root.join("include"));
    let mut searched = Vec::new();
    searched.extend(beside(nvcc));
    if let Ok(real) = fs::canonicalize(nvcc) {
        if let Some(dir) = beside(&real) {
            if !searched.contains(&dir) {
                searched.push(dir);
            }
        }
    }
    match searched.iter().find(|dir| dir.join("cuda_runtime.h").is_file()) {
        Some(dir) => Ok(dir.clone()),
        None => Err(JitError::CudaIncludeNotFound { nvcc: nvcc.to_path_buf(), searched }),
    }
}

/// [`Environment::nccl_include`] beside `loaded`, failing with the error the JIT reports.
pub fn find_nccl_include(env: &Environment, loaded: Option<LoadedNccl<'_>>) -> Result<Candidate, JitError> {
    env.nccl_include(loaded.map(|l| l.library)).map_err(|missing| match missing {
        Missing::BadOverride { variable, path, problem } => JitError::BadEnvironmentPath { variable, path, problem },
        Missing::NotFound { searched } => JitError::NcclIncludeNotFound { searched, loaded: loaded.map(|l| l.version) },
    })
}

/// The release of the NCCL headers in `include_dir` (its `nccl.h`'s `NCCL_VERSION_CODE`), checked to have the
/// device API (`nccl_device.h`, 2.28 or newer) and, when given, to be `expected` (the loaded libnccl's).
pub fn check_nccl_include(include_dir: &Path, expected: Option<Version>) -> Result<Version, JitError> {
    let header = include_dir.join("nccl.h");
    let text = fs::read_to_string(&header)
        .map_err(|_| JitError::NcclIncludeNotFound { searched: vec![include_dir.to_path_buf()], loaded: expected })?;
    let version = parse_nccl_version_code(&text)
        .map(Version::from_code)
        .ok_or_else(|| JitError::NcclVersionUnreadable { header: header.clone() })?;
    if let Some(loaded) = expected {
        if loaded != version {
            return Err(JitError::NcclVersionMismatch {
                include_dir: include_dir.to_path_buf(),
                headers: version,
                loaded,
            });
        }
    }
    if !version.at_least(DEVICE_API) || !include_dir.join("nccl_device.h").is_file() {
        return Err(JitError::NcclWithoutDeviceApi { include_dir: include_dir.to_path_buf(), version });
    }
    Ok(version)
}

/// The integer of the `#define NCCL_VERSION_CODE <n>` line in `nccl.h`.
pub(crate) fn parse_nccl_version_code(header: &str) -> Option<i32> {
    header.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix('#')?.trim_start().strip_prefix("define")?;
        let mut words = rest.split_whitespace();
        (words.next()? == "NCCL_VERSION_CODE").then_some(())?;
        words.next()?.parse().ok()
    })
}

/// The complete output of `nvcc --version` (part of every cache key).
pub fn nvcc_version(nvcc: &Path) -> Result<String, JitError> {
    let output = Command::new(nvcc)
        .arg("--version")
        .output()
        .map_err(|e| JitError::NvccUnusable { nvcc: nvcc.to_path_buf(), reason: e.to_string() })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(JitError::NvccUnusable {
            nvcc: nvcc.to_path_buf(),
            reason: format!("{}: {}", output.status, stderr.trim()),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// `"13.0.88"` from nvcc's `Cuda compilation tools, release 13.0, V13.0.88`.
pub fn parse_nvcc_release(version_text: &str) -> Option<&str> {
    version_text.lines().find(|l| l.contains("release")).and_then(|line| {
        line.split([',', ' '])
            .find_map(|word| word.strip_prefix('V').filter(|v| v.starts_with(|c: char| c.is_ascii_digit())))
    })
}

#[cfg(test)]
mod tests;
