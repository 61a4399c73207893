//! The pinned CUDA/NCCL toolchain under `<workspace>/target/weft-toolchain`: its pins, its
//! on-disk layout, its stamp, and the environment it hands to test processes.
//!
//! Installing it is `provision.rs`; this file only describes and finds it, so `doctor` can
//! use it without ever touching the network.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

use crate::nccl_version::{version_code_from_header, NcclVersion};

/// CUDA wheels installed into the toolchain's venv. nvvm and crt move with nvcc: a newer
/// nvvm emits PTX that the 13.0 ptxas rejects, so all of them stay on 13.0.
pub const CUDA_PACKAGES: [&str; 5] = [
    "nvidia-cuda-nvcc==13.0.*",
    "nvidia-nvvm==13.0.*",
    "nvidia-cuda-crt==13.0.*",
    "nvidia-cuda-runtime==13.0.*",
    "nvidia-cuda-cccl==13.0.*",
];

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

/// `<workspace>/target/weft-toolchain`. Deliberately not under `CARGO_TARGET_DIR`: every
/// engineer's private target dir shares one toolchain, and its path is part of the contract.
pub fn toolchain_dir(workspace_root: &Path) -> PathBuf {
    workspace_root.join("target").join("weft-toolchain")
}

/// The pinned spec written into the stamp. Any change to the pins changes this text, which
/// makes the next `cargo xtask test` provision again.
pub fn pinned_spec() -> String {
    let mut spec = String::from("weft-toolchain 1\n");
    for package in CUDA_PACKAGES {
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
    pub version: NcclVersion,
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
}

impl Toolchain {
    /// Finds every pinned component under `dir`, without running anything.
    pub fn locate(dir: &Path) -> Result<Self> {
        let dir = std::path::absolute(dir).with_context(|| format!("cannot make {} absolute", dir.display()))?;
        let venv = dir.join("venv");
        let site_packages = find_site_packages(&venv)
            .with_context(|| format!("no venv with nvidia/cu13/bin/nvcc under {}", venv.display()))?;
        let cuda_home = site_packages.join("nvidia").join("cu13");
        let nvcc = cuda_home.join("bin").join("nvcc");
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
                NcclVersion::parse(pin) == Some(version),
                "{} declares NCCL {version}, but the toolchain pins {pin}",
                include_dir.join("nccl.h").display()
            );
            ensure!(libnccl.is_file(), "missing {}", libnccl.display());
            nccl.push(NcclInstall { version, include_dir, libnccl });
        }
        Ok(Self { dir, cuda_home, nvcc, nccl })
    }

    /// The environment test and bench processes get. Other crates code against these names.
    pub fn env(&self) -> Result<Vec<(String, OsString)>> {
        let includes: Vec<(NcclVersion, &Path)> =
            self.nccl.iter().map(|install| (install.version, install.include_dir.as_path())).collect();
        let mut env = vec![
            ("WEFT_TOOLCHAIN_DIR".to_owned(), self.dir.clone().into()),
            ("WEFT_NVCC".to_owned(), self.nvcc.clone().into()),
            ("CUDA_HOME".to_owned(), self.cuda_home.clone().into()),
            ("WEFT_CODEGEN_NCCL_INCLUDES".to_owned(), format_codegen_includes(&includes)?.into()),
        ];
        for install in &self.nccl {
            env.push((libnccl_env_name(install.version), install.libnccl.clone().into()));
        }
        Ok(env)
    }
}

/// `WEFT_TEST_LIBNCCL_2_28_9` for 2.28.9.
pub fn libnccl_env_name(version: NcclVersion) -> String {
    format!("WEFT_TEST_LIBNCCL_{}", version.underscored())
}

/// `2.28.9=/abs/include;2.32.3=/abs/include`, the value of `WEFT_CODEGEN_NCCL_INCLUDES`.
///
/// Paths that would make the list ambiguous (containing `;` or `=`, or not UTF-8, which
/// `std::env::var` on the reading side would reject) are refused rather than mangled.
pub fn format_codegen_includes(entries: &[(NcclVersion, &Path)]) -> Result<String> {
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

/// Version declared by `<include_dir>/nccl.h`.
pub fn read_header_version(include_dir: &Path) -> Result<NcclVersion> {
    let header = include_dir.join("nccl.h");
    let text = fs::read_to_string(&header).with_context(|| format!("cannot read {}", header.display()))?;
    let code = version_code_from_header(&text)
        .with_context(|| format!("{} declares no NCCL_VERSION_CODE", header.display()))?;
    Ok(NcclVersion::from_code(code))
}

/// `venv/lib/pythonX.Y/site-packages` holding the CUDA wheels. Globbed rather than asked of
/// the venv's python, so locating works offline and without spawning anything; if several
/// Python versions left directories behind, the one that has nvcc wins.
fn find_site_packages(venv: &Path) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = fs::read_dir(venv.join("lib"))
        .ok()?
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("python"))
        .map(|entry| entry.path().join("site-packages"))
        .collect();
    candidates.sort();
    candidates.into_iter().find(|site| site.join("nvidia/cu13/bin/nvcc").is_file())
}

/// The "release" line of `nvcc --version`, e.g. "Cuda compilation tools, release 13.0, V13.0.88".
pub fn nvcc_version(nvcc: &Path) -> Result<String> {
    let output =
        Command::new(nvcc).arg("--version").output().with_context(|| format!("cannot run {}", nvcc.display()))?;
    ensure!(
        output.status.success(),
        "{} --version failed ({}): {}",
        nvcc.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find(|line| line.contains("release"))
        .or_else(|| stdout.lines().rfind(|line| !line.trim().is_empty()))
        .unwrap_or("(no version output)");
    Ok(line.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(text: &str) -> NcclVersion {
        NcclVersion::parse(text).unwrap()
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
        for package in CUDA_PACKAGES {
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

    #[test]
    fn toolchain_lives_under_the_real_target_dir() {
        assert_eq!(toolchain_dir(Path::new("/ws")), Path::new("/ws/target/weft-toolchain"));
    }

    #[test]
    fn locate_reports_a_missing_toolchain() {
        let error = Toolchain::locate(Path::new("/nonexistent/weft-toolchain")).unwrap_err();
        assert!(error.to_string().contains("nvcc"), "{error:#}");
    }
}
