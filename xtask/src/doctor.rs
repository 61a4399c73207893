//! `cargo xtask doctor`: what weft would find on this machine, and how to fix what is missing.
//!
//! It only reads: no pip, no network, no writes. Every problem is a ✗ line followed by the
//! fix; the command still exits 0, because a report that fails is a report nobody reads to
//! the end.

use std::env;
use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::nccl_version::NcclVersion;
use crate::probe::{libnccl_version, probe_gpus, DriverProblem};
use crate::toolchain::{
    nvcc_version, pinned_spec, read_header_version, read_stamp, stamp_is_current, toolchain_dir, Toolchain,
    NCCL_VERSIONS,
};

/// Library directories tried after every configured location, in this order.
const SYSTEM_LIB_DIRS: [&str; 6] = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/local/lib",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/cuda/lib64",
];

/// Header directories tried when no library location has its own `include/`.
const SYSTEM_INCLUDE_DIRS: [&str; 3] = ["/usr/include", "/usr/local/include", "/usr/local/cuda/include"];

/// Prints the report's lines and counts the problems.
#[derive(Debug, Default)]
struct Report {
    problems: usize,
}

impl Report {
    /// `println!` panics on a closed pipe (`cargo xtask doctor | head`); a reader that
    /// stopped reading is not an error worth a backtrace, so write errors are dropped.
    fn line(&self, text: &str) {
        let _ = writeln!(io::stdout(), "{text}");
    }
    fn section(&self, title: &str) {
        self.line(&format!("\n{title}"));
    }
    fn ok(&self, text: &str) {
        self.line(&format!("  ✓ {text}"));
    }
    fn info(&self, text: &str) {
        self.line(&format!("  · {text}"));
    }
    fn problem(&mut self, text: &str, fix: &str) {
        self.problems += 1;
        self.line(&format!("  ✗ {text}\n      fix: {fix}"));
    }
}

/// Runs every check and prints the report.
pub fn doctor(workspace_root: &Path) {
    let mut report = Report::default();
    report.line("weft doctor: what weft finds on this machine");

    check_toolchain(&mut report, workspace_root);
    let libnccl = check_libnccl(&mut report, workspace_root);
    check_headers(&mut report, workspace_root, libnccl.as_ref());
    check_nvcc(&mut report, workspace_root);
    check_gpus(&mut report);
    check_env_overrides(&mut report);

    report.line(&match report.problems {
        0 => "\ndoctor: no problems found".to_owned(),
        1 => "\ndoctor: 1 problem (✗ above, each with its fix)".to_owned(),
        count => format!("\ndoctor: {count} problems (✗ above, each with its fix)"),
    });
}

fn check_toolchain(report: &mut Report, workspace_root: &Path) {
    report.section("Provisioned toolchain (used by `cargo xtask test`)");
    let dir = toolchain_dir(workspace_root);
    let fix = "run `cargo xtask test` (or `cargo xtask provision`) with network access";
    if !stamp_is_current(read_stamp(&dir).as_deref(), &pinned_spec()) {
        report.problem(&format!("not provisioned for the current pins at {}", dir.display()), fix);
        return;
    }
    match Toolchain::locate(&dir) {
        Ok(toolchain) => {
            report.ok(&format!("{} (stamp matches pins)", toolchain.dir.display()));
            report.info(&format!("nvcc {}", toolchain.nvcc.display()));
            for install in &toolchain.nccl {
                report.info(&format!(
                    "NCCL {} headers {} (NCCL_VERSION_CODE {})",
                    install.version,
                    install.include_dir.display(),
                    install.version.code()
                ));
                report.info(&format!("NCCL {} library {}", install.version, install.libnccl.display()));
            }
        }
        Err(error) => report
            .problem(&format!("stamped but incomplete: {error:#}"), &format!("delete {} and {fix}", dir.display())),
    }
}

/// A place libnccl may be, with the headers that belong to it.
#[derive(Debug, Clone)]
struct NcclLocation {
    source: String,
    lib_dir: PathBuf,
    include_dir: PathBuf,
}

/// The libnccl weft would load, with where it came from.
#[derive(Debug, Clone)]
struct FoundLibnccl {
    location: NcclLocation,
    version: NcclVersion,
}

fn nccl_locations(workspace_root: &Path) -> Vec<NcclLocation> {
    let mut locations = Vec::new();
    if let Some(home) = env::var_os("NCCL_HOME").filter(|value| !value.is_empty()) {
        let home = PathBuf::from(home);
        locations.push(NcclLocation {
            source: "NCCL_HOME".into(),
            lib_dir: home.join("lib"),
            include_dir: home.join("include"),
        });
    }
    for dir in env::split_paths(&env::var_os("LD_LIBRARY_PATH").unwrap_or_default()) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        locations.push(NcclLocation {
            source: "LD_LIBRARY_PATH".into(),
            include_dir: dir.join("..").join("include"),
            lib_dir: dir,
        });
    }
    if let Some(wheel) = python_nccl_wheel() {
        locations.push(NcclLocation {
            source: "pip wheel (python3 -c 'import nvidia.nccl')".into(),
            lib_dir: wheel.join("lib"),
            include_dir: wheel.join("include"),
        });
    }
    // Newest first: on a machine with nothing else, the most capable NCCL is the useful one.
    for version in NCCL_VERSIONS.iter().rev() {
        let wheel = toolchain_dir(workspace_root).join(format!("nccl-{version}")).join("nvidia").join("nccl");
        locations.push(NcclLocation {
            source: format!("provisioned toolchain (NCCL {version})"),
            lib_dir: wheel.join("lib"),
            include_dir: wheel.join("include"),
        });
    }
    for dir in SYSTEM_LIB_DIRS {
        let lib_dir = PathBuf::from(dir);
        let include_dir = match dir {
            "/usr/local/lib" => PathBuf::from("/usr/local/include"),
            "/usr/local/cuda/lib64" => PathBuf::from("/usr/local/cuda/include"),
            _ => PathBuf::from("/usr/include"),
        };
        locations.push(NcclLocation { source: "system".into(), lib_dir, include_dir });
    }
    locations
}

/// The directory of the `nvidia-nccl-*` wheel installed for the python3 on PATH (the
/// PyTorch venv on the GPU machine), if any.
fn python_nccl_wheel() -> Option<PathBuf> {
    let output =
        Command::new("python3").args(["-c", "import nvidia.nccl as m; print(list(m.__path__)[0])"]).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let path = String::from_utf8(output.stdout).ok()?;
    let path = PathBuf::from(path.trim());
    path.is_dir().then_some(path)
}

fn libnccl_in(dir: &Path) -> Option<PathBuf> {
    ["libnccl.so.2", "libnccl.so"].iter().map(|name| dir.join(name)).find(|path| path.is_file())
}

fn check_libnccl(report: &mut Report, workspace_root: &Path) -> Option<FoundLibnccl> {
    report.section("libnccl (search: NCCL_HOME/lib, LD_LIBRARY_PATH, pip wheel, provisioned toolchain, system dirs)");
    let mut seen = Vec::new();
    let mut selected: Option<FoundLibnccl> = None;
    for location in nccl_locations(workspace_root) {
        let Some(path) = libnccl_in(&location.lib_dir) else {
            if location.source == "NCCL_HOME" {
                report.problem(
                    &format!("NCCL_HOME is set but {} has no libnccl.so.2", location.lib_dir.display()),
                    "point NCCL_HOME at an NCCL install whose lib/ holds libnccl.so.2, or unset it",
                );
            }
            continue;
        };
        let canonical = path.canonicalize().unwrap_or_else(|_| path.clone());
        if seen.contains(&canonical) {
            continue;
        }
        seen.push(canonical);
        match libnccl_version(&path) {
            Ok(version) if selected.is_none() => {
                report.ok(&format!(
                    "libnccl {version} at {} (from {}; ncclGetVersion {})",
                    path.display(),
                    location.source,
                    version.code()
                ));
                selected = Some(FoundLibnccl { location, version });
            }
            Ok(version) => report.info(&format!(
                "also found: libnccl {version} at {} (from {}), shadowed by the one above",
                path.display(),
                location.source
            )),
            Err(error) => report.problem(
                &format!("{} (from {}) does not load: {error:#}", path.display(), location.source),
                "remove the broken library from that location, or set NCCL_HOME to a working NCCL",
            ),
        }
    }
    if selected.is_none() {
        report.problem(
            "no libnccl found",
            "set NCCL_HOME to an NCCL install (lib/libnccl.so.2), `pip install nvidia-nccl-cu13`, \
             or run `cargo xtask test` to provision the toolchain's copies",
        );
    }
    selected
}

fn check_headers(report: &mut Report, workspace_root: &Path, libnccl: Option<&FoundLibnccl>) {
    report.section("NCCL headers (WEFT_NCCL_INCLUDE, else the include/ beside libnccl)");
    let has_header = |dir: &Path| dir.join("nccl.h").is_file();
    let (include_dir, source) = if let Some(dir) = env::var_os("WEFT_NCCL_INCLUDE").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        if !has_header(&dir) {
            report.problem(
                &format!("WEFT_NCCL_INCLUDE={} has no nccl.h", dir.display()),
                "point WEFT_NCCL_INCLUDE at the directory that contains nccl.h, or unset it",
            );
            return;
        }
        (dir, "WEFT_NCCL_INCLUDE".to_owned())
    } else if let Some(found) = libnccl.filter(|found| has_header(&found.location.include_dir)) {
        (found.location.include_dir.clone(), format!("beside the libnccl from {}", found.location.source))
    } else {
        let fallback = nccl_locations(workspace_root)
            .into_iter()
            .map(|location| (location.include_dir, location.source))
            .chain(SYSTEM_INCLUDE_DIRS.iter().map(|dir| (PathBuf::from(dir), "system".to_owned())))
            .find(|(dir, _)| has_header(dir));
        let Some(found) = fallback else {
            report.problem(
                "no nccl.h found",
                "set WEFT_NCCL_INCLUDE (or NCCL_HOME) to NCCL headers matching your libnccl, \
                 or run `cargo xtask test` to provision them",
            );
            return;
        };
        found
    };

    let version = match read_header_version(&include_dir) {
        Ok(version) => version,
        Err(error) => {
            report.problem(&format!("{error:#}"), "point WEFT_NCCL_INCLUDE at an unmodified NCCL include directory");
            return;
        }
    };
    let described =
        format!("NCCL {version} headers at {} (NCCL_VERSION_CODE {}, {source})", include_dir.display(), version.code());
    match libnccl {
        Some(found) if found.version == version => {
            report.ok(&format!("{described}; match libnccl {}", found.version));
        }
        Some(found) => report.problem(
            &format!("{described}; libnccl is {}: kernels would be compiled against the wrong NCCL", found.version),
            &format!(
                "set WEFT_NCCL_INCLUDE to the include dir of NCCL {}, or NCCL_HOME to an NCCL whose \
                 lib/ and include/ are the same release",
                found.version
            ),
        ),
        None => report.ok(&format!("{described}; no libnccl to compare against")),
    }
}

fn check_nvcc(report: &mut Report, workspace_root: &Path) {
    report.section("nvcc (search: WEFT_NVCC, CUDA_HOME/bin, PATH, provisioned toolchain, /usr/local/cuda)");
    let mut candidates: Vec<(PathBuf, String)> = Vec::new();
    if let Some(nvcc) = env::var_os("WEFT_NVCC").filter(|v| !v.is_empty()) {
        candidates.push((PathBuf::from(nvcc), "WEFT_NVCC".into()));
    }
    if let Some(home) = env::var_os("CUDA_HOME").filter(|v| !v.is_empty()) {
        candidates.push((Path::new(&home).join("bin").join("nvcc"), "CUDA_HOME".into()));
    }
    for dir in env::split_paths(&env::var_os("PATH").unwrap_or_default()) {
        candidates.push((dir.join("nvcc"), "PATH".into()));
    }
    if let Ok(toolchain) = Toolchain::locate(&toolchain_dir(workspace_root)) {
        candidates.push((toolchain.nvcc, "provisioned toolchain".into()));
    }
    candidates.push((PathBuf::from("/usr/local/cuda/bin/nvcc"), "system".into()));

    // An explicit WEFT_NVCC is what weft will run, so a broken one is the answer, not a
    // reason to look further; CUDA_HOME is often set for other tools and only adds a candidate.
    let explicit = env::var_os("WEFT_NVCC").filter(|v| !v.is_empty()).is_some();
    let chosen =
        if explicit { candidates.into_iter().next() } else { candidates.into_iter().find(|(path, _)| path.is_file()) };
    match chosen {
        Some((nvcc, source)) if !nvcc.is_file() => report.problem(
            &format!("{} (from {source}) does not exist", nvcc.display()),
            "point WEFT_NVCC at an nvcc executable, or unset it",
        ),
        Some((nvcc, source)) => match nvcc_version(&nvcc) {
            Ok(version) => report.ok(&format!("{} (from {source}): {version}", nvcc.display())),
            Err(error) => report.problem(
                &format!("{} (from {source}) does not run: {error:#}", nvcc.display()),
                "reinstall it, or run `cargo xtask test` to provision a working one",
            ),
        },
        None => report.problem(
            "no nvcc found",
            "run `cargo xtask test` (provisions nvcc 13.0 from pip), or set WEFT_NVCC / CUDA_HOME",
        ),
    }

    match Command::new("gcc").arg("--version").output() {
        Ok(output) if output.status.success() => {
            let stdout = String::from_utf8_lossy(&output.stdout);
            report.ok(&format!("host compiler for nvcc: {}", stdout.lines().next().unwrap_or("gcc").trim()));
        }
        _ => report.problem(
            "no gcc on PATH (nvcc needs it as the host compiler)",
            "install gcc (Debian/Ubuntu: apt-get install gcc g++)",
        ),
    }
}

fn check_gpus(report: &mut Report) {
    report.section("GPUs (CUDA driver: libcuda.so.1)");
    let no_gpu_fix = "none needed for the CPU suites (`cargo xtask test`); GPU tests (ignored \
                      here, run with `-- --include-ignored`) and examples need a machine with an \
                      NVIDIA driver and GPU";
    match probe_gpus() {
        Ok(driver) => {
            let version = driver
                .driver_version
                .map(|v| format!("CUDA {}.{}", v / 1000, v % 1000 / 10))
                .unwrap_or_else(|| "version unknown".into());
            if driver.gpus.is_empty() {
                report.problem(&format!("driver ({version}) sees no GPU"), no_gpu_fix);
            }
            for gpu in &driver.gpus {
                let (major, minor) = gpu.compute_capability;
                report.ok(&format!(
                    "GPU {}: {} (compute capability {major}.{minor}, sm_{major}{minor}; driver {version})",
                    gpu.ordinal, gpu.name
                ));
            }
        }
        Err(DriverProblem::NoDriver(detail)) => {
            report.problem(&format!("no CUDA driver found ({detail})"), no_gpu_fix);
        }
        Err(DriverProblem::CallFailed { call, code, name }) => {
            let fix = match code {
                100 => "no GPU is visible: check `nvidia-smi` and CUDA_VISIBLE_DEVICES",
                35 => "the driver is older than CUDA 13.0 needs: install driver 580 or newer",
                _ => "check `nvidia-smi`; a driver/kernel-module mismatch needs a reboot or module reload",
            };
            report.problem(&format!("{call} failed: {name} ({code})"), fix);
        }
    }
}

fn check_env_overrides(report: &mut Report) {
    report.section("Environment overrides");
    // These three decide a section above, which already reports them when they are broken;
    // counting them again here would double the problem count for one mistake.
    const CHECKED_ABOVE: [&str; 3] = ["NCCL_HOME", "WEFT_NVCC", "WEFT_NCCL_INCLUDE"];
    for name in ["NCCL_HOME", "WEFT_NVCC", "WEFT_NCCL_INCLUDE", "WEFT_CACHE_DIR", "CUDA_HOME", "NCCL_NVLS_ENABLE"] {
        let Some(value) = env::var_os(name).filter(|v| !v.is_empty()) else {
            let default = match name {
                "NCCL_NVLS_ENABLE" => "NCCL decides; weft's GPU machines need NCCL_NVLS_ENABLE=0",
                "WEFT_CACHE_DIR" => "cubins cached in the default cache dir",
                _ => "default search",
            };
            report.info(&format!("{name} unset ({default})"));
            continue;
        };
        let shown = Path::new(&value).display().to_string();
        if CHECKED_ABOVE.contains(&name) {
            report.info(&format!("{name}={shown} (checked above)"));
            continue;
        }
        match override_problem(name, &value) {
            None => report.ok(&format!("{name}={shown}")),
            Some(fix) => report.problem(&format!("{name}={shown} is not usable"), fix),
        }
    }
}

/// Why a set override cannot work, as the fix to apply; None when it looks fine.
fn override_problem(name: &str, value: &OsString) -> Option<&'static str> {
    let path = Path::new(value);
    match name {
        "CUDA_HOME" if !path.join("bin").join("nvcc").is_file() => {
            Some("point CUDA_HOME at a CUDA toolkit (one with bin/nvcc), or unset it")
        }
        "WEFT_CACHE_DIR" if path.exists() && !path.is_dir() => {
            Some("point WEFT_CACHE_DIR at a directory (it is created if missing)")
        }
        "NCCL_NVLS_ENABLE" if value != "0" && value != "1" => Some("set NCCL_NVLS_ENABLE to 0 or 1"),
        _ => None,
    }
}
