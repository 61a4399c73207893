//! Finding nvcc, the CUDA headers next to it, and the NCCL headers that belong to the loaded libnccl.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::JitError;
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

/// The environment discovery reads, captured once so tests can substitute their own.
#[derive(Debug, Clone, Default)]
pub(crate) struct DiscoveryEnv {
    pub(crate) weft_nvcc: Option<PathBuf>,
    pub(crate) cuda_home: Option<PathBuf>,
    pub(crate) path: Option<OsString>,
    /// `WEFT_TOOLCHAIN_DIR`, else `<workspace>/target/weft-toolchain` (what `cargo xtask` provisions).
    pub(crate) toolchain_dir: PathBuf,
    /// `/usr/local/cuda`.
    pub(crate) system_cuda: PathBuf,
    pub(crate) weft_nccl_include: Option<PathBuf>,
    pub(crate) nccl_home: Option<PathBuf>,
    /// `/usr/include`.
    pub(crate) system_include: PathBuf,
}

impl DiscoveryEnv {
    pub(crate) fn from_process() -> DiscoveryEnv {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let workspace_toolchain = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")))
            .join("target")
            .join("weft-toolchain");
        DiscoveryEnv {
            weft_nvcc: var("WEFT_NVCC").map(PathBuf::from),
            cuda_home: var("CUDA_HOME").map(PathBuf::from),
            path: var("PATH"),
            toolchain_dir: var("WEFT_TOOLCHAIN_DIR").map(PathBuf::from).unwrap_or(workspace_toolchain),
            system_cuda: PathBuf::from("/usr/local/cuda"),
            weft_nccl_include: var("WEFT_NCCL_INCLUDE").map(PathBuf::from),
            nccl_home: var("NCCL_HOME").map(PathBuf::from),
            system_include: PathBuf::from("/usr/include"),
        }
    }
}

impl Toolchain {
    /// Finds nvcc and the headers, checking the NCCL headers against `loaded` when given.
    ///
    /// nvcc: `WEFT_NVCC`, `CUDA_HOME/bin/nvcc`, `PATH`, the toolchain `cargo xtask` provisions
    /// (`WEFT_TOOLCHAIN_DIR`, default `<workspace>/target/weft-toolchain`), `/usr/local/cuda/bin/nvcc`.
    /// NCCL headers: `WEFT_NCCL_INCLUDE`, `NCCL_HOME/include`, the `include/` beside the loaded library's
    /// `lib/`, `/usr/include`. The first directory holding `nccl.h` is used; its `NCCL_VERSION_CODE` must equal
    /// `loaded.version`.
    pub fn discover(loaded: Option<LoadedNccl<'_>>) -> Result<Toolchain, JitError> {
        Toolchain::discover_in(&DiscoveryEnv::from_process(), loaded)
    }

    pub(crate) fn discover_in(env: &DiscoveryEnv, loaded: Option<LoadedNccl<'_>>) -> Result<Toolchain, JitError> {
        let nvcc = find_nvcc(env)?;
        let nccl_include = find_nccl_include(env, loaded)?;
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

fn find_nvcc(env: &DiscoveryEnv) -> Result<PathBuf, JitError> {
    if let Some(path) = &env.weft_nvcc {
        return if path.is_file() {
            Ok(path.clone())
        } else {
            Err(JitError::BadEnvironmentPath { variable: "WEFT_NVCC", path: path.clone(), problem: "is not a file" })
        };
    }
    let mut candidates = Vec::new();
    if let Some(home) = &env.cuda_home {
        candidates.push(home.join("bin").join("nvcc"));
    }
    if let Some(path) = &env.path {
        candidates.extend(std::env::split_paths(path).filter(|d| !d.as_os_str().is_empty()).map(|d| d.join("nvcc")));
    }
    candidates.extend(provisioned_nvcc(&env.toolchain_dir));
    candidates.push(env.system_cuda.join("bin").join("nvcc"));
    match candidates.iter().find(|c| c.is_file()) {
        Some(found) => Ok(found.clone()),
        None => Err(JitError::NvccNotFound { searched: candidates }),
    }
}

/// `<dir>/venv/lib/python3*/site-packages/nvidia/cu13/bin/nvcc`, one per Python found (or the pattern itself,
/// so a failure message shows where it looked).
fn provisioned_nvcc(toolchain_dir: &Path) -> Vec<PathBuf> {
    let lib = toolchain_dir.join("venv").join("lib");
    let tail = |python: &Path| python.join("site-packages").join("nvidia").join("cu13").join("bin").join("nvcc");
    let mut pythons: Vec<PathBuf> = fs::read_dir(&lib)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    pythons.sort();
    if pythons.is_empty() {
        return vec![tail(&lib.join("python3*"))];
    }
    pythons.iter().map(|p| tail(p)).collect()
}

/// `../include` beside nvcc, first as given, then with symlinks resolved (`/usr/bin/nvcc` → a toolkit).
fn find_cuda_include(nvcc: &Path) -> Result<PathBuf, JitError> {
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

fn find_nccl_include(env: &DiscoveryEnv, loaded: Option<LoadedNccl<'_>>) -> Result<PathBuf, JitError> {
    if let Some(dir) = &env.weft_nccl_include {
        return if dir.join("nccl.h").is_file() {
            Ok(dir.clone())
        } else {
            Err(JitError::BadEnvironmentPath {
                variable: "WEFT_NCCL_INCLUDE",
                path: dir.clone(),
                problem: "holds no nccl.h (it must be NCCL's include directory)",
            })
        };
    }
    let mut candidates = Vec::new();
    if let Some(home) = &env.nccl_home {
        candidates.push(home.join("include"));
    }
    if let Some(loaded) = loaded {
        for library in [Some(loaded.library.to_path_buf()), fs::canonicalize(loaded.library).ok()].into_iter().flatten()
        {
            if let Some(dir) = library.parent().and_then(Path::parent).map(|root| root.join("include")) {
                if !candidates.contains(&dir) {
                    candidates.push(dir);
                }
            }
        }
    }
    candidates.push(env.system_include.clone());
    match candidates.iter().find(|dir| dir.join("nccl.h").is_file()) {
        Some(dir) => Ok(dir.clone()),
        None => Err(JitError::NcclIncludeNotFound { searched: candidates, loaded: loaded.map(|l| l.version) }),
    }
}

/// Reads the headers' release and checks it has the device API and matches `expected`.
fn check_nccl_include(include_dir: &Path, expected: Option<Version>) -> Result<Version, JitError> {
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

fn nvcc_version(nvcc: &Path) -> Result<String, JitError> {
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
pub(crate) fn parse_nvcc_release(version_text: &str) -> Option<&str> {
    version_text.lines().find(|l| l.contains("release")).and_then(|line| {
        line.split([',', ' '])
            .find_map(|word| word.strip_prefix('V').filter(|v| v.starts_with(|c: char| c.is_ascii_digit())))
    })
}

#[cfg(test)]
mod tests;
