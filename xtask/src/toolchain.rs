//! The pinned CUDA/NCCL toolchain under `<workspace>/target/weft-toolchain`: its pins, its
//! on-disk layout, its stamp, and the environment it hands to test processes.
//!
//! Installing it is `provision.rs`; this file only describes and finds it, so `doctor` can
//! use it without ever touching the network.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use weft_host::discovery::{provisioned_nvcc_in, Environment};
use weft_host::Version;

/// CUDA wheels installed into the toolchain's venv. nvvm and crt move with nvcc: a newer
/// nvvm emits PTX that the 13.0 ptxas rejects, so all of them stay on 13.0.
pub const CUDA_PACKAGES: [&str; 5] = [
    "nvidia-cuda-nvcc==13.0.*",
    "nvidia-nvvm==13.0.*",
    "nvidia-cuda-crt==13.0.*",
    "nvidia-cuda-runtime==13.0.*",
    "nvidia-cuda-cccl==13.0.*",
];

/// A real job launcher, installed into the venv too: MPICH's Hydra `mpiexec` (its pip wheel carries the binaries),
/// for the test that starts ranks the way an MPI job does (host/tests/job.rs). It sets `PMI_RANK`, `PMI_SIZE`,
/// `MPI_LOCALRANKID` and `MPI_LOCALNRANKS`, which `Job::from_env` reads.
pub const LAUNCHER_PACKAGES: [&str; 1] = ["mpich==5.0.*"];

/// numpy, for the CPU models of GPU index math that tests/models.rs runs (scripts/gemm_layout_model.py and
/// scripts/tp_gemm_model.py) with the venv's python.
pub const MODEL_PACKAGES: [&str; 1] = ["numpy==2.*"];

/// The wheel that carries NCCL's headers and libnccl.
pub const NCCL_PACKAGE: &str = "nvidia-nccl-cu13";

/// NCCL releases every kernel is compiled against: the oldest with the device API weft
/// supports, and the newest tested. Each gets its own `--target` directory because pip
/// cannot hold two versions of one package in one environment.
pub const NCCL_VERSIONS: [&str; 2] = ["2.28.9", "2.32.3"];

/// File whose presence (with the current pins inside) means "fully provisioned".
pub const STAMP_FILE: &str = "stamp";

/// Separates the pinned spec in the stamp from the informational list of what pip resolved.
const RESOLVED_MARKER: &str = "--- resolved";

/// The workspace root: xtask lives one level below it.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// Where the toolchain is provisioned and looked for: `WEFT_TOOLCHAIN_DIR`, else
/// `<workspace>/target/weft-toolchain` — the runtime's own answer ([`Environment::toolchain_dir`]), so the nvcc
/// it searches for is the one installed here. Deliberately not under `CARGO_TARGET_DIR`: every engineer's
/// private target dir shares one toolchain, and its path is part of the contract.
pub fn toolchain_dir(env: &Environment) -> PathBuf {
    env.toolchain_dir().to_path_buf()
}

/// Parses a pinned release, "2.28.9".
pub fn parse_version(text: &str) -> Option<Version> {
    let mut parts = text.trim().split('.').map(|part| part.parse::<i32>().ok().filter(|n| (0..100).contains(n)));
    let version = Version::new(parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

/// A release as it appears in environment variable names: `2_28_9`.
pub fn underscored(version: Version) -> String {
    format!("{}_{}_{}", version.major(), version.minor(), version.patch())
}

/// The pinned spec written into the stamp. Any change to the pins changes this text, which
/// makes the next `cargo xtask test` provision again.
pub fn pinned_spec() -> String {
    let mut spec = String::from("weft-toolchain 1\n");
    for package in CUDA_PACKAGES.iter().chain(&LAUNCHER_PACKAGES).chain(&MODEL_PACKAGES) {
        spec.push_str(&format!("venv {package}\n"));
    }
    for version in NCCL_VERSIONS {
        spec.push_str(&format!("target nccl-{version} {NCCL_PACKAGE}=={version}\n"));
    }
    spec
}

/// Full stamp text: the spec that decides freshness, then what was actually installed (for
/// humans chasing a difference between two machines).
pub fn stamp_text(spec: &str, resolved: &str) -> String {
    format!("{spec}{RESOLVED_MARKER}\n{resolved}")
}

/// Whether a stamp (None: no stamp file) certifies an install of exactly `spec`.
pub fn stamp_is_current(stamp: Option<&str>, spec: &str) -> bool {
    let Some(stamp) = stamp else {
        return false;
    };
    let pinned = match stamp.split_once(&format!("{RESOLVED_MARKER}\n")) {
        Some((pinned, _resolved)) => pinned,
        None => stamp,
    };
    pinned == spec
}

/// Reads the stamp of a toolchain dir; a missing or unreadable one counts as absent.
pub fn read_stamp(dir: &Path) -> Option<String> {
    fs::read_to_string(dir.join(STAMP_FILE)).ok()
}

/// One NCCL release inside the toolchain.
#[derive(Debug, Clone)]
pub struct NcclInstall {
    /// Version declared by its `nccl.h`.
    pub version: Version,
    /// Directory holding `nccl.h` and `nccl_device.h`.
    pub include_dir: PathBuf,
    /// `libnccl.so.2`.
    pub libnccl: PathBuf,
}

/// A provisioned toolchain, every path checked to exist.
#[derive(Debug, Clone)]
pub struct Toolchain {
    pub dir: PathBuf,
    /// The wheel's `nvidia/cu13`: has `bin/nvcc`, `include/`, `include/cccl`.
    pub cuda_home: PathBuf,
    pub nvcc: PathBuf,
    pub nccl: Vec<NcclInstall>,
    /// MPICH's `mpiexec` (see [`LAUNCHER_PACKAGES`]).
    pub mpiexec: PathBuf,
    /// The venv's python, which has numpy (see [`MODEL_PACKAGES`]).
    pub python: PathBuf,
}

impl Toolchain {
    /// Finds every pinned component under `dir`, without running anything.
    pub fn locate(dir: &Path) -> Result<Self> {
        let dir = std::path::absolute(dir).with_context(|| format!("cannot make {} absolute", dir.display()))?;
        // The runtime's search for a provisioned nvcc; if several Python versions left directories behind, the
        // first that has nvcc wins, as it does at run time.
        let searched = provisioned_nvcc_in(&dir);
        let nvcc = searched
            .iter()
            .find(|nvcc| nvcc.is_file())
            .cloned()
            .with_context(|| format!("no nvcc in the toolchain's venv (looked at {})", searched[0].display()))?;
        let cuda_home = nvcc.parent().and_then(Path::parent).context("nvcc has no toolkit directory")?.to_path_buf();
        // Headers from the runtime and cccl wheels: nvcc alone installs fine without them,
        // and the failure would only show inside the first kernel compilation.
        for needed in ["include/cuda_runtime.h", "include/cccl/cuda/std/version"] {
            let path = cuda_home.join(needed);
            ensure!(path.is_file(), "missing {}", path.display());
        }

        let mut nccl = Vec::new();
        for pin in NCCL_VERSIONS {
            let wheel = dir.join(format!("nccl-{pin}")).join("nvidia").join("nccl");
            let include_dir = wheel.join("include");
            let libnccl = wheel.join("lib").join("libnccl.so.2");
            let version = read_header_version(&include_dir)?;
            ensure!(
                parse_version(pin) == Some(version),
                "{} declares NCCL {version}, but the toolchain pins {pin}",
                include_dir.join("nccl.h").display()
            );
            ensure!(libnccl.is_file(), "missing {}", libnccl.display());
            nccl.push(NcclInstall { version, include_dir, libnccl });
        }
        let mpiexec = dir.join("venv").join("bin").join("mpiexec");
        ensure!(mpiexec.is_file(), "missing {} (the mpich wheel)", mpiexec.display());
        let python = dir.join("venv").join("bin").join("python");
        // numpy sits next to nvcc's `nvidia/` in the venv's site-packages.
        let site_packages = cuda_home.ancestors().nth(2).context("nvcc is not inside a site-packages directory")?;
        let numpy = site_packages.join("numpy");
        ensure!(python.is_file() && numpy.is_dir(), "missing {} (the numpy wheel)", numpy.display());
        Ok(Self { dir, cuda_home, nvcc, nccl, mpiexec, python })
    }

    /// The environment test and bench processes get. Other crates code against these names.
    pub fn env(&self) -> Result<Vec<(String, OsString)>> {
        let includes: Vec<(Version, &Path)> =
            self.nccl.iter().map(|install| (install.version, install.include_dir.as_path())).collect();
        let mut env = vec![
            ("WEFT_TOOLCHAIN_DIR".to_owned(), self.dir.clone().into()),
            ("WEFT_NVCC".to_owned(), self.nvcc.clone().into()),
            ("CUDA_HOME".to_owned(), self.cuda_home.clone().into()),
            ("WEFT_CODEGEN_NCCL_INCLUDES".to_owned(), format_codegen_includes(&includes)?.into()),
            ("WEFT_TEST_MPIEXEC".to_owned(), self.mpiexec.clone().into()),
            ("WEFT_TEST_PYTHON".to_owned(), self.python.clone().into()),
        ];
        for install in &self.nccl {
            env.push((libnccl_env_name(install.version), install.libnccl.clone().into()));
        }
        Ok(env)
    }
}

/// `WEFT_TEST_LIBNCCL_2_28_9` for 2.28.9.
pub fn libnccl_env_name(version: Version) -> String {
    format!("WEFT_TEST_LIBNCCL_{}", underscored(version))
}

/// `2.28.9=/abs/include;2.32.3=/abs/include`, the value of `WEFT_CODEGEN_NCCL_INCLUDES`.
///
/// Paths that would make the list ambiguous (containing `;` or `=`, or not UTF-8, which
/// `std::env::var` on the reading side would reject) are refused rather than mangled.
pub fn format_codegen_includes(entries: &[(Version, &Path)]) -> Result<String> {
    let mut parts = Vec::with_capacity(entries.len());
    for (version, dir) in entries {
        let Some(dir_text) = dir.to_str() else {
            bail!("NCCL include dir {} is not UTF-8; move the workspace to a UTF-8 path", dir.display());
        };
        if dir_text.contains([';', '=']) {
            bail!(
                "NCCL include dir {dir_text} contains ';' or '=', which WEFT_CODEGEN_NCCL_INCLUDES \
                 cannot carry; move the workspace to a path without them"
            );
        }
        parts.push(format!("{version}={dir_text}"));
    }
    Ok(parts.join(";"))
}

/// The release of the NCCL headers in `include_dir`, read and checked (device API present) by the runtime's
/// own [`weft_host::jit::check_nccl_include`].
pub fn read_header_version(include_dir: &Path) -> Result<Version> {
    weft_host::jit::check_nccl_include(include_dir, None).map_err(anyhow::Error::from)
}

/// `nvcc --version`, as the runtime reads it, shortened to the release ("13.0.88") when it has one.
pub fn nvcc_version(nvcc: &Path) -> Result<String> {
    let text = weft_host::jit::nvcc_version(nvcc)?;
    Ok(weft_host::jit::parse_nvcc_release(&text).map(str::to_owned).unwrap_or(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(text: &str) -> Version {
        parse_version(text).unwrap()
    }

    #[test]
    fn codegen_includes_format() {
        let formatted = format_codegen_includes(&[
            (version("2.28.9"), Path::new("/t/nccl-2.28.9/nvidia/nccl/include")),
            (version("2.32.3"), Path::new("/t/nccl-2.32.3/nvidia/nccl/include")),
        ])
        .unwrap();
        assert_eq!(formatted, "2.28.9=/t/nccl-2.28.9/nvidia/nccl/include;2.32.3=/t/nccl-2.32.3/nvidia/nccl/include");
    }

    #[test]
    fn codegen_includes_refuse_ambiguous_paths() {
        assert!(format_codegen_includes(&[(version("2.28.9"), Path::new("/a;b"))]).is_err());
        assert!(format_codegen_includes(&[(version("2.28.9"), Path::new("/a=b"))]).is_err());
    }

    #[test]
    fn libnccl_env_names() {
        assert_eq!(libnccl_env_name(version("2.28.9")), "WEFT_TEST_LIBNCCL_2_28_9");
        assert_eq!(libnccl_env_name(version("2.32.3")), "WEFT_TEST_LIBNCCL_2_32_3");
    }

    #[test]
    fn spec_names_every_pin() {
        let spec = pinned_spec();
        for package in CUDA_PACKAGES.iter().chain(&LAUNCHER_PACKAGES).chain(&MODEL_PACKAGES) {
            assert!(spec.contains(package), "{package} missing from {spec}");
        }
        for nccl in NCCL_VERSIONS {
            assert!(spec.contains(&format!("{NCCL_PACKAGE}=={nccl}")));
        }
    }

    #[test]
    fn pinned_nccl_versions_parse() {
        for nccl in NCCL_VERSIONS {
            assert_eq!(version(nccl).to_string(), nccl);
        }
    }

    #[test]
    fn missing_stamp_is_not_current() {
        assert!(!stamp_is_current(None, &pinned_spec()));
    }

    #[test]
    fn stamp_with_same_spec_is_current_whatever_was_resolved() {
        let spec = pinned_spec();
        let stamp = stamp_text(&spec, "nvidia-cuda-nvcc==13.0.88\n");
        assert!(stamp_is_current(Some(&stamp), &spec));
        assert!(stamp_is_current(Some(&stamp_text(&spec, "")), &spec));
    }

    #[test]
    fn stamp_of_other_pins_is_not_current() {
        let old = pinned_spec().replace("2.32.3", "2.31.0");
        let stamp = stamp_text(&old, "");
        assert!(!stamp_is_current(Some(&stamp), &pinned_spec()));
    }

    #[test]
    fn truncated_or_empty_stamp_is_not_current() {
        let spec = pinned_spec();
        let half = &spec[..spec.len() / 2];
        assert!(!stamp_is_current(Some(half), &spec));
        assert!(!stamp_is_current(Some(""), &spec));
    }

    /// xtask installs where the runtime looks: weft-host's default is this workspace's target/weft-toolchain,
    /// and WEFT_TOOLCHAIN_DIR moves both.
    #[test]
    fn toolchain_lives_where_the_runtime_looks() {
        let root = Path::new("/ws");
        let mut env = Environment::isolated(root);
        env.default_toolchain_dir = Environment::from_process().default_toolchain_dir;
        assert_eq!(toolchain_dir(&env), workspace_root().join("target").join("weft-toolchain"));
        env.weft_toolchain_dir = Some(PathBuf::from("/elsewhere"));
        assert_eq!(toolchain_dir(&env), Path::new("/elsewhere"));
    }

    #[test]
    fn versions_parse_and_name_variables() {
        assert_eq!(version("2.32.3").code, 23203);
        assert_eq!(underscored(version("2.32.3")), "2_32_3");
        for bad in ["2.32", "2.32.3.1", "2.x.3", "2.100.1", ""] {
            assert_eq!(parse_version(bad), None, "{bad}");
        }
    }

    #[test]
    fn header_versions_are_read_by_the_runtime_check() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("nccl.h"), "#define NCCL_VERSION_CODE 22809\n").unwrap();
        let error = read_header_version(dir.path()).unwrap_err().to_string();
        assert!(error.contains("nccl_device.h"), "headers without the device API are refused: {error}");
        fs::write(dir.path().join("nccl_device.h"), "").unwrap();
        assert_eq!(read_header_version(dir.path()).unwrap(), version("2.28.9"));
    }

    #[test]
    fn locate_reports_a_missing_toolchain() {
        let error = Toolchain::locate(Path::new("/nonexistent/weft-toolchain")).unwrap_err();
        assert!(error.to_string().contains("nvcc"), "{error:#}");
    }
}
