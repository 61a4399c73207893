//! One nvcc invocation: what to compile, the exact command line, and how failures are reported.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use super::cache::CacheKey;
use super::{JitError, Toolchain};

/// A GPU architecture, `sm_<major><minor>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GpuArch {
    /// Compute capability major (9 on Hopper).
    pub major: u32,
    /// Compute capability minor.
    pub minor: u32,
}

impl GpuArch {
    /// Hopper (H100, H200).
    pub const SM_90: GpuArch = GpuArch { major: 9, minor: 0 };

    /// The architecture of a device whose compute capability is `(major, minor)`, as cudarc reports it.
    pub fn from_compute_capability((major, minor): (i32, i32)) -> GpuArch {
        GpuArch { major: major.max(0).unsigned_abs(), minor: minor.max(0).unsigned_abs() }
    }
}

impl GpuArch {
    /// The architecture-specific target (`sm_90a`) on Hopper, whose `wgmma` and `setmaxnreg` exist only there (a
    /// cubin for `sm_90a` runs on compute capability 9.0 exactly, which is what a cubin compiled for this device
    /// needs), else the architecture itself: what nvcc's `-arch` gets.
    pub fn nvcc_target(&self) -> String {
        if (self.major, self.minor) == (9, 0) {
            format!("{self}a")
        } else {
            self.to_string()
        }
    }
}

impl fmt::Display for GpuArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}", self.major, self.minor)
    }
}

/// What to compile: one generated translation unit.
#[derive(Debug, Clone, Copy)]
pub struct CompileRequest<'a> {
    /// The kernel's name, for logs, errors and file names.
    pub name: &'a str,
    /// The complete `.cu` source (it includes `"weft.cuh"`).
    pub source: &'a str,
    /// The text of weft's device header, written as `weft.cuh` into a directory on the include path
    /// (`weft_device::WEFT_CUH`).
    pub weft_header: &'a str,
    /// The GPU to compile for.
    pub arch: GpuArch,
    /// Flags appended to nvcc's command line after weft's own (part of the cache key).
    pub extra_flags: &'a [&'a str],
    /// The GEMM mainloop to compile `gemm_block` with; `None`: `WEFT_GEMM_MAINLOOP`'s ([`gemm_mainloop`]).
    pub gemm_mainloop: Option<GemmMainloop>,
}

impl<'a> CompileRequest<'a> {
    /// A request with no extra flags.
    pub fn new(name: &'a str, source: &'a str, weft_header: &'a str, arch: GpuArch) -> CompileRequest<'a> {
        CompileRequest { name, source, weft_header, arch, extra_flags: &[], gemm_mainloop: None }
    }

    /// The same request with `flags` appended to nvcc's command line.
    pub fn with_flags(self, flags: &'a [&'a str]) -> CompileRequest<'a> {
        CompileRequest { extra_flags: flags, ..self }
    }

    /// The same request with `gemm_block` compiled to `mainloop`, whatever `WEFT_GEMM_MAINLOOP` says.
    pub fn with_gemm_mainloop(self, mainloop: GemmMainloop) -> CompileRequest<'a> {
        CompileRequest { gemm_mainloop: Some(mainloop), ..self }
    }

    /// Whether the kernel gets the `wgmma` form: asked for (explicitly, or by default where the source calls a GEMM
    /// mainloop), and a target that has it. The default leaves kernels without a GEMM as they were: the `wgmma` form
    /// changes nothing in them but their traps, which no longer print (weft.cuh, `WEFT_TRAP_PRINTS`).
    fn wgmma(&self) -> bool {
        let asked = match self.gemm_mainloop {
            Some(mainloop) => mainloop == GemmMainloop::Wgmma,
            None => matches!(gemm_mainloop(), Ok(GemmMainloop::Wgmma)) && calls_a_gemm_mainloop(self.source),
        };
        asked && (self.arch.major, self.arch.minor) == (9, 0)
    }

    /// The flags nvcc gets besides include directories and file names, in order; they are part of the cache
    /// key.
    pub fn flags(&self) -> Vec<String> {
        let mut flags: Vec<String> = vec![
            "-cubin".into(),
            // sm_90a on Hopper whichever the mainloop: its setmaxnreg lets gemm_tiles' mma.sync loop give the
            // consumers the producers' registers too (a cubin for this device runs on it only anyway).
            format!("-arch={}", self.arch.nvcc_target()),
            "-std=c++17".into(),
            "--extended-lambda".into(),
            "--expt-relaxed-constexpr".into(),
            "-O3".into(),
        ];
        if self.wgmma() {
            flags.push("-DWEFT_GEMM_WGMMA=1".into());
        }
        if self.source.contains("gemm_tiles") {
            // The launch sizes the shared memory by the same count; a bad WEFT_GEMM_TILES_STAGES is refused there
            // (gemm_tiles_config), so the compile keeps the GPU's own count.
            let capability = (i32::try_from(self.arch.major).unwrap_or(0), i32::try_from(self.arch.minor).unwrap_or(0));
            let stages = gemm_tiles_stages(capability).unwrap_or_else(|_| most_gemm_tiles_stages(self.arch));
            flags.push(format!("-DWEFT_GEMM_TILES_STAGES={stages}"));
        }
        flags.extend(self.extra_flags.iter().map(|f| f.to_string()));
        flags
    }
}

/// Whether C++ source may call one of weft.cuh's GEMM mainloops: it names `gemm_block` (the macro emits
/// `weft::gemm_block_at(a, ..)` for `a.gemm_block(..)`) or `gemm_tiles` (`a.gemm_tiles(b)` stays a method call). A
/// source that only mentions one gets the `wgmma` form for nothing worse than traps that do not print.
fn calls_a_gemm_mainloop(source: &str) -> bool {
    source.contains("gemm_block") || source.contains("gemm_tiles")
}

/// The GEMM mainloop behind `gemm_block` and `gemm_tiles` (docs/gemm.md): by default Hopper's `wgmma` (and TMA, for
/// `gemm_tiles`) where the target has it and `mma.sync` elsewhere (any sm_80+ GPU); with `WEFT_GEMM_MAINLOOP=mma_sync`,
/// `mma.sync` everywhere (kernels for compute capability 9.0 are compiled for `sm_90a` either way). Part of the
/// compile flags, so of the cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmMainloop {
    /// `mma.sync` everywhere (`WEFT_GEMM_MAINLOOP=mma_sync`).
    MmaSync,
    /// `wgmma` (and TMA, for `gemm_tiles`) where the GPU has it, `mma.sync` elsewhere: the default.
    Wgmma,
}

/// The environment variable that picks the [`GemmMainloop`].
pub const GEMM_MAINLOOP_ENV: &str = "WEFT_GEMM_MAINLOOP";

/// `WEFT_GEMM_MAINLOOP` read: unset or `wgmma` (the default: `wgmma` where the GPU has it), or `mma_sync`;
/// anything else is an error naming the choices.
pub fn gemm_mainloop() -> Result<GemmMainloop, JitError> {
    match std::env::var(GEMM_MAINLOOP_ENV) {
        Err(_) => Ok(GemmMainloop::Wgmma),
        Ok(value) => match value.as_str() {
            "" | "wgmma" => Ok(GemmMainloop::Wgmma),
            "mma_sync" => Ok(GemmMainloop::MmaSync),
            _ => Err(JitError::BadEnvironmentValue {
                variable: GEMM_MAINLOOP_ENV,
                value,
                expected: "`wgmma` (the default: `wgmma` on Hopper, `mma.sync` elsewhere) and `mma_sync` (`mma.sync` \
                           everywhere)",
            }),
        },
    }
}

/// The mainloop kernels for a GPU of compute capability `capability` compile to: `WEFT_GEMM_MAINLOOP`'s, except that
/// `wgmma` exists on 9.0 only (elsewhere weft.cuh keeps `mma.sync`). What `gemm_tiles` runs there too: TMA + `wgmma`,
/// or `cp.async` + `mma.sync`.
pub fn gemm_mainloop_on(capability: (i32, i32)) -> Result<GemmMainloop, JitError> {
    Ok(match gemm_mainloop()? {
        GemmMainloop::Wgmma if capability == (9, 0) => GemmMainloop::Wgmma,
        _ => GemmMainloop::MmaSync,
    })
}

/// The environment variable that sets how many stages `gemm_tiles` pipes through ([`gemm_tiles_stages`]).
pub const GEMM_TILES_STAGES_ENV: &str = "WEFT_GEMM_TILES_STAGES";

/// How many 48 KB shared-memory stages `gemm_tiles` pipes through on a GPU of compute capability `capability`: as many
/// as the most shared memory a block may have there holds, at most 4 (`launch::gemm_tiles_shared_bytes`: 197 696 bytes
/// for 4, 148 528 for 3, 99 360 for 2). 4 where a block may have 227 KB (Hopper, datacenter Blackwell), 3 where 163 KB
/// (compute capability 8.0, an A100, and 8.7), 2 where 99 KB (8.6, 8.9, 12.x). `WEFT_GEMM_TILES_STAGES=2` or `3` asks
/// for fewer (to leave shared memory to other work on the multiprocessor, or to run an A100's pipeline on Hopper); more
/// than the table gives, or anything else, is an error naming the choices. Kernels that call `gemm_tiles` are compiled
/// for this count and [`gemm_tiles_config`](crate::launch::gemm_tiles_config) sizes their shared memory for it; a GPU
/// that grants less than the table says is refused there, with this count named. The variable is read at the first
/// call, once per process.
pub fn gemm_tiles_stages(capability: (i32, i32)) -> Result<u32, JitError> {
    // Read once per process: a kernel is compiled once per process (the registry keeps its module), so the launches'
    // shared memory must keep to the count it was compiled for, and a launch need not read the environment.
    static ASKED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let asked = ASKED.get_or_init(|| std::env::var(GEMM_TILES_STAGES_ENV).ok());
    stages_asked(asked.as_deref(), most_gemm_tiles_stages(GpuArch::from_compute_capability(capability)))
}

/// The stages `WEFT_GEMM_TILES_STAGES`' `value` asks for where the GPU holds `most`.
fn stages_asked(value: Option<&str>, most: u32) -> Result<u32, JitError> {
    match value {
        None => Ok(most),
        Some(value) => match value.parse::<u32>() {
            Ok(stages) if (2..=most).contains(&stages) => Ok(stages),
            _ => Err(JitError::BadEnvironmentValue {
                variable: GEMM_TILES_STAGES_ENV,
                value: value.to_string(),
                expected: "2, 3 or 4, at most what the GPU's shared memory holds (4 on Hopper, 3 on an A100, 2 where \
                           a block may have 99 KB)",
            }),
        },
    }
}

/// [`gemm_tiles_stages`]' table: the stages a block's most shared memory holds on `arch`.
fn most_gemm_tiles_stages(arch: GpuArch) -> u32 {
    match (arch.major, arch.minor) {
        (8, 0) | (8, 7) => 3,
        (major, _) if (9..12).contains(&major) => 4,
        _ => 2,
    }
}

/// Where a [`CompiledKernel`]'s cubin came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOrigin {
    /// nvcc ran.
    Compiled,
    /// Read from the on-disk cache (and verified).
    Disk,
    /// Already in this process's memory.
    Memory,
}

/// A cubin ready to load, and how it was obtained.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CompiledKernel {
    /// The kernel's name.
    pub name: String,
    /// The cache key (see `docs/jit.md`).
    pub key: CacheKey,
    /// The architecture it was compiled for.
    pub arch: GpuArch,
    /// The cubin (an ELF image), shared with the in-process cache.
    pub cubin: Arc<[u8]>,
    /// The cache entry on disk.
    pub path: PathBuf,
    /// Where the generated source is written before nvcc runs (it exists only if a compile of this kernel ever
    /// ran in this cache directory).
    pub source_path: PathBuf,
    /// Where the cubin came from.
    pub origin: CacheOrigin,
    /// How long getting it took (the compile, the disk read, or the memo lookup).
    pub duration: Duration,
}

impl CompiledKernel {
    /// Whether the cubin came from a cache (disk or memory) rather than a fresh nvcc run.
    pub fn from_cache(&self) -> bool {
        self.origin != CacheOrigin::Compiled
    }
}

/// The complete argument list for compiling `source` to `output` with `header_dir` holding `weft.cuh`.
pub(crate) fn nvcc_args(
    tc: &Toolchain,
    req: &CompileRequest<'_>,
    header_dir: &Path,
    source: &Path,
    output: &Path,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = req.flags().into_iter().map(OsString::from).collect();
    let includes = [Some(header_dir), Some(tc.nccl_include.as_path()), Some(tc.cuda_include.as_path())]
        .into_iter()
        .chain([tc.cccl_include.as_deref()])
        .flatten();
    for dir in includes {
        let mut flag = OsString::from("-I");
        flag.push(dir);
        args.push(flag);
    }
    args.push(source.into());
    args.push("-o".into());
    args.push(output.into());
    args
}

/// Runs nvcc; on failure, writes its output to `<source>.log` and returns the error carrying it.
pub(crate) fn run_nvcc(
    tc: &Toolchain,
    req: &CompileRequest<'_>,
    header_dir: &Path,
    source: &Path,
    output: &Path,
) -> Result<(), JitError> {
    let args = nvcc_args(tc, req, header_dir, source, output);
    tracing::trace!(nvcc = %tc.nvcc.display(), ?args, "running nvcc");
    let result = Command::new(&tc.nvcc)
        .args(&args)
        .output()
        .map_err(|e| JitError::NvccUnusable { nvcc: tc.nvcc.clone(), reason: e.to_string() })?;
    let mut text = String::from_utf8_lossy(&result.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&result.stdout);
    if !stdout.trim().is_empty() {
        text.push_str(&stdout);
    }
    if result.status.success() {
        if !text.trim().is_empty() {
            tracing::debug!(kernel = req.name, "nvcc said:\n{}", text.trim_end());
        }
        return Ok(());
    }
    let log_path = source.with_extension("cu.log");
    if let Err(e) = std::fs::write(&log_path, &text) {
        tracing::warn!(path = %log_path.display(), "could not keep nvcc's log: {e}");
    }
    Err(JitError::CompileFailed {
        kernel: req.name.to_string(),
        source_path: source.to_path_buf(),
        log_path,
        status: result.status.to_string(),
        output: text,
    })
}

const EXCERPT_LINES: usize = 30;
const EXCERPT_LINE_CHARS: usize = 300;

/// The part of nvcc's output worth putting in an error message: all of it when short, else a window starting
/// just before the first error (template backtraces and warnings before it are noise), capped in lines and
/// line length.
pub(crate) fn excerpt(output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let first_error = lines.iter().position(|l| l.contains("error")).unwrap_or(0);
    let start = first_error.saturating_sub(2);
    let shown = &lines[start..lines.len().min(start + EXCERPT_LINES)];
    let mut text = String::new();
    if start > 0 {
        text.push_str(&format!("… ({start} lines before)\n"));
    }
    for line in shown {
        match line.char_indices().nth(EXCERPT_LINE_CHARS) {
            Some((cut, _)) => {
                text.push_str(&line[..cut]);
                text.push_str(" …\n");
            }
            None => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    let after = lines.len() - start - shown.len();
    if after > 0 {
        text.push_str(&format!("… ({after} more lines in the full log)\n"));
    }
    text.trim_end().to_string()
}

/// A file-name-safe version of a kernel name.
pub(crate) fn file_stem(name: &str) -> String {
    let stem: String =
        name.chars().take(64).map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if stem.is_empty() {
        "kernel".into()
    } else {
        stem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names_follow_nvcc() {
        assert_eq!(GpuArch::SM_90.to_string(), "sm_90");
        assert_eq!(GpuArch::from_compute_capability((10, 0)).to_string(), "sm_100");
        assert_eq!(GpuArch::from_compute_capability((8, 6)), GpuArch { major: 8, minor: 6 });
        assert_eq!(GpuArch::SM_90.nvcc_target(), "sm_90a");
        assert_eq!(GpuArch::from_compute_capability((10, 0)).nvcc_target(), "sm_100");
    }

    #[test]
    fn the_command_line_is_the_documented_one() {
        let tc = Toolchain {
            nvcc: "/cuda/bin/nvcc".into(),
            nvcc_version: "V13.0.88".into(),
            cuda_include: "/cuda/include".into(),
            cccl_include: Some("/cuda/include/cccl".into()),
            nccl_include: "/nccl/include".into(),
            nccl_version: crate::version::Version::new(2, 28, 9),
        };
        let req = CompileRequest::new("k", "", "", GpuArch::SM_90)
            .with_flags(&["-lineinfo"])
            .with_gemm_mainloop(GemmMainloop::Wgmma);
        let args = nvcc_args(&tc, &req, Path::new("/cache/include/abc"), Path::new("/src/k.cu"), Path::new("/o.cubin"));
        let args: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            args.join(" "),
            "-cubin -arch=sm_90a -std=c++17 --extended-lambda --expt-relaxed-constexpr -O3 -DWEFT_GEMM_WGMMA=1 \
             -lineinfo -I/cache/include/abc -I/nccl/include -I/cuda/include -I/cuda/include/cccl /src/k.cu -o /o.cubin"
        );
    }

    #[test]
    fn the_wgmma_form_is_asked_for_on_hopper_only() {
        let on = |arch, mainloop| {
            CompileRequest::new("k", "", "", arch)
                .with_gemm_mainloop(mainloop)
                .flags()
                .contains(&"-DWEFT_GEMM_WGMMA=1".into())
        };
        let ampere = GpuArch::from_compute_capability((8, 0));
        let blackwell = GpuArch::from_compute_capability((10, 0));
        assert!(on(GpuArch::SM_90, GemmMainloop::Wgmma));
        assert!(!on(GpuArch::SM_90, GemmMainloop::MmaSync));
        assert!(!on(ampere, GemmMainloop::Wgmma) && !on(blackwell, GemmMainloop::Wgmma));
        // Left to the default, a kernel that calls no GEMM mainloop keeps its form (and its printing traps).
        let default = |source| {
            CompileRequest::new("k", source, "", GpuArch::SM_90).flags().contains(&"-DWEFT_GEMM_WGMMA=1".into())
        };
        if std::env::var(GEMM_MAINLOOP_ENV).is_err() {
            assert!(
                default("auto t = x.gemm_tiles(w);")
                    && default("auto t = weft::gemm_block_at(x, 0, k, w, 0, n, k, 7);")
            );
            assert!(!default("out[i] = x[i] + y[i];"));
            // What each GPU runs by default.
            assert_eq!(gemm_mainloop_on((9, 0)).unwrap(), GemmMainloop::Wgmma, "wgmma is the default on Hopper");
            assert_eq!(gemm_mainloop_on((8, 0)).unwrap(), GemmMainloop::MmaSync);
            assert_eq!(gemm_mainloop_on((10, 0)).unwrap(), GemmMainloop::MmaSync);
        }
    }

    #[test]
    fn gemm_tiles_gets_the_stages_its_gpu_holds() {
        let flag = |arch, source: &str| -> Option<String> {
            CompileRequest::new("k", source, "", arch)
                .flags()
                .into_iter()
                .find(|f| f.starts_with("-DWEFT_GEMM_TILES_STAGES="))
        };
        let arch = GpuArch::from_compute_capability;
        // Only kernels that open the loop get the count (others keep their cache keys).
        assert_eq!(flag(GpuArch::SM_90, "out[i] = x[i];"), None);
        assert_eq!(flag(GpuArch::SM_90, "auto t = weft::gemm_block_at(x, 0, k, w, 0, n, k, 7);"), None);
        // Fewer stages than the GPU holds may be asked for; more, or anything else, is refused naming the choices.
        assert_eq!(stages_asked(Some("3"), 4).unwrap(), 3);
        assert_eq!(stages_asked(Some("2"), 3).unwrap(), 2);
        for (value, most) in [("4", 3), ("1", 4), ("5", 4), ("three", 4), ("", 4)] {
            let text = stages_asked(Some(value), most).unwrap_err().to_string();
            assert!(text.contains(GEMM_TILES_STAGES_ENV) && text.contains("2, 3 or 4"), "{text}");
        }
        if std::env::var(GEMM_TILES_STAGES_ENV).is_err() {
            for (capability, stages) in
                [((9, 0), 4), ((10, 0), 4), ((8, 0), 3), ((8, 7), 3), ((8, 6), 2), ((8, 9), 2), ((12, 0), 2)]
            {
                assert_eq!(gemm_tiles_stages(capability).unwrap(), stages, "{capability:?}");
                let want = format!("-DWEFT_GEMM_TILES_STAGES={stages}");
                assert_eq!(flag(arch(capability), "auto t = x.gemm_tiles(w);"), Some(want), "{capability:?}");
            }
        }
    }

    #[test]
    fn short_output_is_kept_whole() {
        assert_eq!(excerpt("a.cu(1): error: x\n"), "a.cu(1): error: x");
    }

    #[test]
    fn long_output_is_cut_around_the_first_error() {
        let mut log: Vec<String> = (0..50).map(|i| format!("warning {i}")).collect();
        log.push("k.cu(7): error: identifier \"y\" is undefined".into());
        log.extend((0..100).map(|i| format!("detail {i}")));
        log.push("x".repeat(1000));
        let text = excerpt(&log.join("\n"));
        assert!(text.starts_with("… (48 lines before)\nwarning 48\nwarning 49\nk.cu(7): error"), "{text}");
        assert!(text.ends_with("… (74 more lines in the full log)"), "{text}");
        assert_eq!(text.lines().count(), EXCERPT_LINES + 2);
        let long = excerpt(&format!("error: {}", "é".repeat(400)));
        assert!(long.ends_with(" …") && long.chars().count() == EXCERPT_LINE_CHARS + 2, "{long}");
    }

    #[test]
    fn file_stems_are_safe() {
        assert_eq!(file_stem("allreduce_add"), "allreduce_add");
        assert_eq!(file_stem("../evil name"), "___evil_name");
        assert_eq!(file_stem(""), "kernel");
    }
}
