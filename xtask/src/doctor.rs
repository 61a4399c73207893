//! `cargo xtask doctor`: what a weft program would find on this machine, and how to fix what is missing.
//!
//! Every search and check here is weft-host's own — `weft_host::discovery`, `sys::search` (the loader's search,
//! opening libnccl as a program would), the JIT's nvcc and header checks, the kernel cache's permission check —
//! so a ✓ means a program finds the same thing, and a ✗ shows the error the program would get, with its fix.
//! Nothing is installed or written. The report always runs to the end; the exit status is 1 when anything a
//! GPU run needs is missing, so scripts can rely on it.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::Command;

use weft_host::discovery::{Environment, Origin, VARIABLES};
use weft_host::jit::{self, JitError, KernelCache, LoadedNccl};
use weft_host::version::DEVICE_API;
use weft_host::Version;

use crate::probe::{probe_gpus, DriverProblem, DriverReport};
use crate::toolchain::{pinned_spec, read_stamp, stamp_is_current, toolchain_dir, Toolchain, NCCL_VERSIONS};

/// What doctor asks the machine rather than the file system: the CUDA driver and the host compiler.
#[derive(Debug)]
pub struct Probes {
    /// The GPUs the CUDA driver reports, or why it cannot.
    pub driver: Result<DriverReport, DriverProblem>,
    /// The first line of `gcc --version`, or `None` when there is no working gcc on `PATH`.
    pub gcc: Option<String>,
}

impl Probes {
    /// Asks this machine.
    pub fn of_this_machine() -> Probes {
        let gcc =
            Command::new("gcc").arg("--version").output().ok().filter(|output| output.status.success()).map(|output| {
                String::from_utf8_lossy(&output.stdout).lines().next().unwrap_or("gcc").trim().to_owned()
            });
        Probes { driver: probe_gpus(), gcc }
    }
}

/// Prints the report for this process's environment and machine; returns the number of problems.
pub fn doctor(env: &Environment) -> usize {
    report(env, Probes::of_this_machine(), &mut io::stdout().lock())
}

/// Writes the report for `env` to `out`; returns the number of problems (✗ lines).
pub fn report(env: &Environment, probes: Probes, out: &mut dyn Write) -> usize {
    let mut report = Report { out, problems: 0 };
    report.line("weft doctor: what a weft program finds on this machine");

    let libnccl = check_libnccl(&mut report, env);
    check_headers(&mut report, env, libnccl.as_ref());
    check_nvcc(&mut report, env, probes.gcc.as_deref());
    check_gpus(&mut report, probes.driver);
    check_cache(&mut report, env);
    report_cublas(&mut report);
    report_environment(&mut report, env);
    report_toolchain(&mut report, env);

    let problems = report.problems;
    report.line(&match problems {
        0 => "\ndoctor: no problems: a weft program on this machine finds everything it needs".to_owned(),
        count => format!(
            "\ndoctor: {count} problem{} (✗ above, each with its fix): a weft program that uses the GPU would fail \
             on this machine until {} fixed. (`cargo xtask test` runs no GPU code and installs its own nvcc and \
             NCCL: it does not need them.)",
            if count == 1 { "" } else { "s" },
            if count == 1 { "it is" } else { "they are" }
        ),
    });
    problems
}

/// Prints the report's lines and counts the problems.
struct Report<'a> {
    out: &'a mut dyn Write,
    problems: usize,
}

impl Report<'_> {
    /// Write errors are dropped: a reader that stopped reading (`cargo xtask doctor | head`) is not an error
    /// worth a backtrace, and the exit status still counts every problem.
    fn line(&mut self, text: &str) {
        let _ = writeln!(self.out, "{text}");
    }
    fn section(&mut self, title: &str) {
        self.line(&format!("\n{title}"));
    }
    fn ok(&mut self, text: &str) {
        self.line(&format!("  ✓ {text}"));
    }
    fn info(&mut self, text: &str) {
        self.line(&format!("  · {text}"));
    }
    fn problem(&mut self, text: &str, fix: &str) {
        self.problems += 1;
        self.line(&format!("  ✗ {text}\n      fix: {fix}"));
    }
    /// A problem reported in the runtime's own words; weft's errors end with their fix.
    fn error(&mut self, error: &JitError) {
        self.problems += 1;
        self.line(&format!("  ✗ {error}"));
    }
}

/// The libnccl a program would load, as (path, version).
fn check_libnccl(report: &mut Report<'_>, env: &Environment) -> Option<(PathBuf, Version)> {
    report.section(
        "libnccl (WEFT_LIBNCCL if set, and then nothing else; else NCCL_HOME/lib, each LD_LIBRARY_PATH directory, \
         the pip wheel of python3, the dynamic linker's search)",
    );
    let search = weft_host::sys::search(env);
    for attempt in &search.failed {
        report.info(&format!("passed over {}: {}", attempt.path, attempt.error));
    }
    let Some((library, origin)) = search.found else {
        match &env.weft_libnccl {
            Some(file) => report.problem(
                &format!(
                    "WEFT_LIBNCCL={} could not be loaded, and weft tries nothing else when it is set",
                    file.display()
                ),
                "point WEFT_LIBNCCL at a libnccl.so.2 that loads, or unset it to search the usual places",
            ),
            None => report.problem("no libnccl could be loaded", &no_libnccl_fix(env)),
        }
        return None;
    };
    let (path, version) = (library.path().to_path_buf(), library.version());
    if version.at_least(DEVICE_API) {
        report.ok(&format!("libnccl {version} at {} (from {origin})", path.display()));
    } else {
        report.problem(
            &format!("libnccl {version} at {} (from {origin}) predates NCCL's device API", path.display()),
            "install NCCL 2.28 or newer (`pip install nvidia-nccl-cu13`) and point NCCL_HOME or WEFT_LIBNCCL at it",
        );
    }
    // Libraries later in the search are never loaded while this one is there.
    let candidates = env.libnccl_candidates();
    let chosen = candidates.iter().position(|candidate| {
        candidate.origin == origin
            && (origin == Origin::DynamicLinker || std::fs::canonicalize(&candidate.path).ok().as_ref() == Some(&path))
    });
    for candidate in chosen.map_or(&[][..], |at| &candidates[at + 1..]) {
        if candidate.origin != Origin::DynamicLinker && candidate.path.is_file() {
            report.info(&format!("also present, not used: {} (from {})", candidate.path.display(), candidate.origin));
        }
    }
    Some((path, version))
}

fn no_libnccl_fix(env: &Environment) -> String {
    let mut fix = "install NCCL 2.28 or newer (`pip install nvidia-nccl-cu13` for the python3 on PATH), or set \
                   NCCL_HOME to an NCCL install (its lib/libnccl.so.2) or WEFT_LIBNCCL to the library file"
        .to_owned();
    let provisioned = NCCL_VERSIONS
        .iter()
        .rev()
        .map(|version| toolchain_dir(env).join(format!("nccl-{version}/nvidia/nccl")))
        .find(|home| home.join("lib/libnccl.so.2").is_file());
    if let Some(home) = provisioned {
        fix.push_str(&format!(
            "; the toolchain `cargo xtask provision` installed has one: NCCL_HOME={}",
            home.display()
        ));
    }
    fix
}

fn check_headers(report: &mut Report<'_>, env: &Environment, libnccl: Option<&(PathBuf, Version)>) {
    report.section(
        "NCCL headers for kernels (WEFT_NCCL_INCLUDE if set, and then nothing else; else NCCL_HOME/include, the \
         include/ beside libnccl, /usr/include); they must be libnccl's release",
    );
    let loaded = libnccl.map(|(library, version)| LoadedNccl { library, version: *version });
    let found = match jit::find_nccl_include(env, loaded) {
        Ok(found) => found,
        Err(error) => return report.error(&error),
    };
    match jit::check_nccl_include(&found.path, loaded.map(|l| l.version)) {
        Ok(version) => report.ok(&format!(
            "NCCL {version} headers at {} (from {}), {}",
            found.path.display(),
            found.origin,
            match loaded {
                Some(_) => format!("the release of libnccl, with the device API (NCCL_VERSION_CODE {})", version.code),
                None => "with the device API; no libnccl to compare them with".to_owned(),
            }
        )),
        Err(error) => report.error(&error),
    }
}

fn check_nvcc(report: &mut Report<'_>, env: &Environment, gcc: Option<&str>) {
    report.section(
        "nvcc (WEFT_NVCC if set, and then nothing else; else CUDA_HOME/bin, each PATH directory, the provisioned \
         toolchain, /usr/local/cuda/bin)",
    );
    match jit::find_nvcc(env) {
        Err(error) => report.error(&error),
        Ok(found) => {
            match jit::nvcc_version(&found.path) {
                Ok(text) => report.ok(&format!(
                    "{} (from {}): release {}",
                    found.path.display(),
                    found.origin,
                    jit::parse_nvcc_release(&text).unwrap_or(text.as_str())
                )),
                Err(error) => report.error(&error),
            }
            match jit::find_cuda_include(&found.path) {
                Ok(include) => report.ok(&format!("CUDA headers beside it: {}", include.display())),
                Err(error) => report.error(&error),
            }
        }
    }
    match gcc {
        Some(version) => report.ok(&format!("host compiler for nvcc: {version}")),
        None => report.problem(
            "no working gcc on PATH (nvcc needs it as the host compiler)",
            "install gcc and g++ (Debian/Ubuntu: apt-get install gcc g++) and put them on PATH",
        ),
    }
}

fn check_gpus(report: &mut Report<'_>, driver: Result<DriverReport, DriverProblem>) {
    report.section("GPUs (the CUDA driver, libcuda.so.1)");
    let no_gpu_fix = "run on a machine with an NVIDIA GPU and its driver (CUDA 13.0 or newer: driver 580 or \
                      later) installed";
    match driver {
        Ok(driver) => {
            let version = driver
                .driver_version
                .map(|v| format!("CUDA {}.{}", v / 1000, v % 1000 / 10))
                .unwrap_or_else(|| "version unknown".into());
            if driver.gpus.is_empty() {
                report.problem(&format!("the driver ({version}) sees no GPU"), no_gpu_fix);
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
            report.problem(&format!("no CUDA driver on this machine ({detail})"), no_gpu_fix);
        }
        Err(DriverProblem::CallFailed { call, code, name }) => {
            let fix = match code {
                100 => "no GPU is visible: check `nvidia-smi` and CUDA_VISIBLE_DEVICES",
                35 => "the driver is older than CUDA 13.0 needs: install driver 580 or newer",
                _ => "check `nvidia-smi`; a driver/kernel-module mismatch needs a reboot or a module reload",
            };
            report.problem(&format!("{call} failed: {name} ({code})"), fix);
        }
    }
}

fn check_cache(report: &mut Report<'_>, env: &Environment) {
    report
        .section("Kernel cache (WEFT_CACHE_DIR, else <user cache dir>/weft/kernels; it must be private to this user)");
    let (cache, origin) = match (KernelCache::from_environment(env), env.cache_dir()) {
        (Ok(cache), Some(location)) => (cache, location.origin),
        (Err(error), _) => return report.error(&error),
        (Ok(_), None) => return report.error(&JitError::NoCacheDir),
    };
    let dir = cache.dir().display();
    match cache.check_dir() {
        Ok(true) => report.ok(&format!("{dir} (from {origin}): private to this user")),
        Ok(false) => {
            report.ok(&format!("{dir} (from {origin}): not there yet; the first compile creates it, mode 0700"))
        }
        Err(error) => report.error(&error),
    }
}

/// libcublas: information only, since weft itself never needs it (the examples' and the GEMM benchmark's cuBLAS
/// baselines do, and skip themselves without it).
fn report_cublas(report: &mut Report<'_>) {
    report.section("libcublas (optional: only the cuBLAS baselines of examples 08 and 09 and of `benches/gemm.rs`)");
    let names = ["libcublas.so", "libcublas.so.13", "libcublas.so.12"];
    // SAFETY: opening a shared library runs its initialisers; libcublas's only set up its own state (the same
    // load a program using cudarc's cuBLAS makes). Nothing is called, and the handle is closed at once.
    let found = names.iter().find(|name| unsafe { libloading::Library::new(name) }.is_ok());
    match found {
        Some(name) => report.ok(&format!("{name} loads: the cuBLAS baselines run")),
        None => report.info(&format!(
            "none of {} loads: the cuBLAS baselines are skipped (add the directory holding libcublas.so, from a CUDA \
             toolkit's lib64 or the nvidia-cublas pip wheel, to LD_LIBRARY_PATH to run them)",
            names.join(", ")
        )),
    }
}

fn report_environment(report: &mut Report<'_>, env: &Environment) {
    report.section("Environment variables that steer discovery (docs/toolchain.md)");
    for variable in VARIABLES {
        match env.value_of(variable.name) {
            Some(value) => report.info(&format!("{}={value}\n      {}", variable.name, variable.effect)),
            None => report.info(&format!("{} unset\n      {}", variable.name, variable.effect)),
        }
    }
    for (name, effect) in [
        ("WEFT_PRINT_CUDA", "1 prints each kernel's CUDA C++ to stderr when a process first needs it"),
        ("WEFT_SKIP_PROVISION", "1 makes `cargo xtask` use the toolchain as it is, never running pip"),
    ] {
        match std::env::var_os(name).filter(|value| !value.is_empty()) {
            Some(value) => report.info(&format!("{name}={}\n      {effect}", value.to_string_lossy())),
            None => report.info(&format!("{name} unset\n      {effect}")),
        }
    }
}

/// The toolchain `cargo xtask` installs: information only, since a GPU run does not need it.
fn report_toolchain(report: &mut Report<'_>, env: &Environment) {
    report
        .section("Toolchain of `cargo xtask test` (pinned nvcc and NCCL headers from pip; a GPU run does not need it)");
    let dir = toolchain_dir(env);
    if !stamp_is_current(read_stamp(&dir).as_deref(), &pinned_spec()) {
        report.info(&format!(
            "{}: not provisioned for the current pins; `cargo xtask test` or `cargo xtask provision` installs it \
             (python3 with venv, network access the first time)",
            dir.display()
        ));
        return;
    }
    match Toolchain::locate(&dir) {
        Ok(toolchain) => {
            report.info(&format!("{} (its stamp matches the pins)", toolchain.dir.display()));
            report.info(&format!("nvcc {}", toolchain.nvcc.display()));
            for install in &toolchain.nccl {
                report.info(&format!("NCCL {} headers {}", install.version, install.include_dir.display()));
                report.info(&format!("NCCL {} library {}", install.version, install.libnccl.display()));
            }
        }
        Err(error) => report.info(&format!(
            "{}: stamped but incomplete ({error:#}); delete it and run `cargo xtask provision`",
            dir.display()
        )),
    }
}

/// The report as text, for tests.
#[cfg(test)]
fn report_text(env: &Environment, probes: Probes) -> (usize, String) {
    let mut out = Vec::new();
    let problems = report(env, probes, &mut out);
    (problems, String::from_utf8(out).expect("the report is UTF-8"))
}

#[cfg(test)]
mod tests;
