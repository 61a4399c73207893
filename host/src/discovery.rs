//! Where weft looks for what a GPU run needs: libnccl, NCCL's headers, nvcc, the toolchain `cargo xtask`
//! provisions, and the kernel cache directory.
//!
//! This is the one implementation of those searches. The runtime uses it ([`crate::sys::library`],
//! [`crate::jit::Toolchain::discover`], [`crate::jit::KernelCache::from_env`]) and so do `cargo xtask doctor` and
//! `cargo xtask provision`, so that doctor's ✓ means a program finds the same file. It only searches: it reads
//! the environment and the file system and asks `python3` where the pip wheel is; opening the library and
//! checking versions is the caller's business. The search orders are documented in `docs/host.md`,
//! `docs/jit.md` and `docs/toolchain.md`; [`VARIABLES`] lists every variable that steers them.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// An environment variable that steers discovery, and what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// What weft does with it, in a few words.
    pub effect: &'static str,
}

/// Every environment variable discovery reads, in the order the searches consult them. An empty value counts
/// as unset.
pub const VARIABLES: &[Variable] = &[
    Variable { name: "WEFT_LIBNCCL", effect: "the libnccl file to load; when set, nothing else is tried" },
    Variable { name: "NCCL_HOME", effect: "an NCCL install: lib/libnccl.so.2 is tried, include/ holds its headers" },
    Variable { name: "LD_LIBRARY_PATH", effect: "each directory is searched for libnccl.so.2" },
    Variable {
        name: "WEFT_NCCL_INCLUDE",
        effect: "NCCL's include directory for kernels (must match the loaded libnccl); when set, nothing else is tried",
    },
    Variable { name: "WEFT_NVCC", effect: "the nvcc that compiles kernels; when set, nothing else is tried" },
    Variable { name: "CUDA_HOME", effect: "a CUDA toolkit: bin/nvcc is tried" },
    Variable {
        name: "PATH",
        effect: "each directory is searched for nvcc, and for the python3 that locates the pip NCCL wheel",
    },
    Variable {
        name: "WEFT_TOOLCHAIN_DIR",
        effect: "the toolchain `cargo xtask provision` installs and the runtime searches for nvcc \
                 (default <workspace>/target/weft-toolchain)",
    },
    Variable { name: "WEFT_CACHE_DIR", effect: "the kernel cache directory (default <user cache dir>/weft/kernels)" },
];

/// The file name of libnccl that every search looks for.
pub const LIBNCCL_SONAME: &str = "libnccl.so.2";

/// What discovery reads: the environment variables of [`VARIABLES`] and the fixed system locations, captured
/// once so that tests and tools can substitute their own.
///
/// Start from [`Environment::from_process`] (what the runtime uses) or [`Environment::isolated`] (nothing set,
/// no system locations) and change fields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Environment {
    /// `WEFT_LIBNCCL`.
    pub weft_libnccl: Option<PathBuf>,
    /// `NCCL_HOME`.
    pub nccl_home: Option<PathBuf>,
    /// `LD_LIBRARY_PATH`.
    pub ld_library_path: Option<OsString>,
    /// The interpreter asked where the `nvidia-nccl-cu*` wheel is (`python3`, found through `PATH`); `None`
    /// skips that step.
    pub python: Option<PathBuf>,
    /// What the dynamic linker is asked for last (`libnccl.so.2`: its cache and system directories); `None`
    /// skips that step.
    pub linker_libnccl: Option<PathBuf>,
    /// `WEFT_NCCL_INCLUDE`.
    pub weft_nccl_include: Option<PathBuf>,
    /// The last place NCCL headers are looked for (`/usr/include`).
    pub system_include: PathBuf,
    /// `WEFT_NVCC`.
    pub weft_nvcc: Option<PathBuf>,
    /// `CUDA_HOME`.
    pub cuda_home: Option<PathBuf>,
    /// `PATH`.
    pub path: Option<OsString>,
    /// `WEFT_TOOLCHAIN_DIR`.
    pub weft_toolchain_dir: Option<PathBuf>,
    /// Where the toolchain is when `WEFT_TOOLCHAIN_DIR` is unset (`<workspace>/target/weft-toolchain`).
    pub default_toolchain_dir: PathBuf,
    /// The last place nvcc is looked for (`/usr/local/cuda`, whose `bin/nvcc` is tried).
    pub system_cuda: PathBuf,
    /// `WEFT_CACHE_DIR`.
    pub weft_cache_dir: Option<PathBuf>,
    /// The user's cache directory (`$XDG_CACHE_HOME`, else `~/.cache` on Linux), if there is one.
    pub user_cache_dir: Option<PathBuf>,
}

impl Environment {
    /// This process's environment and the real system locations.
    pub fn from_process() -> Environment {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        Environment {
            weft_libnccl: var("WEFT_LIBNCCL").map(PathBuf::from),
            nccl_home: var("NCCL_HOME").map(PathBuf::from),
            ld_library_path: var("LD_LIBRARY_PATH"),
            python: Some(PathBuf::from("python3")),
            linker_libnccl: Some(PathBuf::from(LIBNCCL_SONAME)),
            weft_nccl_include: var("WEFT_NCCL_INCLUDE").map(PathBuf::from),
            system_include: PathBuf::from("/usr/include"),
            weft_nvcc: var("WEFT_NVCC").map(PathBuf::from),
            cuda_home: var("CUDA_HOME").map(PathBuf::from),
            path: var("PATH"),
            weft_toolchain_dir: var("WEFT_TOOLCHAIN_DIR").map(PathBuf::from),
            default_toolchain_dir: default_toolchain_dir(),
            system_cuda: PathBuf::from("/usr/local/cuda"),
            weft_cache_dir: var("WEFT_CACHE_DIR").map(PathBuf::from),
            user_cache_dir: dirs::cache_dir(),
        }
    }

    /// Nothing set and every fixed location under `root` (where nothing exists unless the caller puts it
    /// there): the starting point of a test that must not see the machine's own installs.
    pub fn isolated(root: &Path) -> Environment {
        Environment {
            weft_libnccl: None,
            nccl_home: None,
            ld_library_path: None,
            python: None,
            linker_libnccl: None,
            weft_nccl_include: None,
            system_include: root.join("system-include"),
            weft_nvcc: None,
            cuda_home: None,
            path: None,
            weft_toolchain_dir: None,
            default_toolchain_dir: root.join("weft-toolchain"),
            system_cuda: root.join("system-cuda"),
            weft_cache_dir: None,
            user_cache_dir: None,
        }
    }

    /// The value this environment holds for `variable` (one of [`VARIABLES`]), as a string for reports.
    pub fn value_of(&self, variable: &str) -> Option<String> {
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let text = |t: &Option<OsString>| t.as_ref().map(|t| t.to_string_lossy().into_owned());
        match variable {
            "WEFT_LIBNCCL" => path(&self.weft_libnccl),
            "NCCL_HOME" => path(&self.nccl_home),
            "LD_LIBRARY_PATH" => text(&self.ld_library_path),
            "WEFT_NCCL_INCLUDE" => path(&self.weft_nccl_include),
            "WEFT_NVCC" => path(&self.weft_nvcc),
            "CUDA_HOME" => path(&self.cuda_home),
            "PATH" => text(&self.path),
            "WEFT_TOOLCHAIN_DIR" => path(&self.weft_toolchain_dir),
            "WEFT_CACHE_DIR" => path(&self.weft_cache_dir),
            _ => None,
        }
    }

    /// The toolchain `cargo xtask provision` installs and the runtime searches: `WEFT_TOOLCHAIN_DIR`, else
    /// `<workspace>/target/weft-toolchain`.
    pub fn toolchain_dir(&self) -> &Path {
        self.weft_toolchain_dir.as_deref().unwrap_or(&self.default_toolchain_dir)
    }

    /// Every libnccl to try, in order; the first that opens and answers `ncclGetVersion` is the one.
    ///
    /// `WEFT_LIBNCCL` alone when set; else `NCCL_HOME/lib`, each `LD_LIBRARY_PATH` directory, the pip wheel's
    /// `nvidia/nccl/lib` (asking `python3 -c 'import nvidia.nccl'`), then the bare soname for the dynamic
    /// linker's own search (ld.so.cache, system directories).
    pub fn libnccl_candidates(&self) -> Vec<Candidate> {
        if let Some(file) = &self.weft_libnccl {
            return vec![Candidate { path: file.clone(), origin: Origin::Variable("WEFT_LIBNCCL") }];
        }
        let mut out = Vec::new();
        if let Some(home) = &self.nccl_home {
            out.push(Candidate { path: home.join("lib").join(LIBNCCL_SONAME), origin: Origin::Variable("NCCL_HOME") });
        }
        for dir in split(self.ld_library_path.as_ref()) {
            out.push(Candidate { path: dir.join(LIBNCCL_SONAME), origin: Origin::Variable("LD_LIBRARY_PATH") });
        }
        if let Some(wheel) = self.python.as_deref().and_then(pip_nccl_wheel) {
            out.push(Candidate { path: wheel.join("lib").join(LIBNCCL_SONAME), origin: Origin::PipWheel });
        }
        if let Some(name) = &self.linker_libnccl {
            out.push(Candidate { path: name.clone(), origin: Origin::DynamicLinker });
        }
        out
    }

    /// The nvcc that compiles kernels: `WEFT_NVCC` (authoritative: if it is not a file, that is the answer),
    /// else the first file among `CUDA_HOME/bin/nvcc`, each `PATH` directory, the provisioned toolchain's, and
    /// `/usr/local/cuda/bin/nvcc`.
    pub fn nvcc(&self) -> Result<Candidate, Missing> {
        if let Some(path) = &self.weft_nvcc {
            return if path.is_file() {
                Ok(Candidate { path: path.clone(), origin: Origin::Variable("WEFT_NVCC") })
            } else {
                Err(Missing::BadOverride { variable: "WEFT_NVCC", path: path.clone(), problem: "is not a file" })
            };
        }
        let mut candidates = Vec::new();
        if let Some(home) = &self.cuda_home {
            candidates.push(Candidate { path: home.join("bin").join("nvcc"), origin: Origin::Variable("CUDA_HOME") });
        }
        for dir in split(self.path.as_ref()) {
            candidates.push(Candidate { path: dir.join("nvcc"), origin: Origin::Variable("PATH") });
        }
        candidates
            .extend(self.provisioned_nvcc().into_iter().map(|path| Candidate { path, origin: Origin::Provisioned }));
        candidates.push(Candidate { path: self.system_cuda.join("bin").join("nvcc"), origin: Origin::System });
        first_existing(candidates, Path::is_file)
    }

    /// The nvcc of the provisioned toolchain ([`provisioned_nvcc_in`] of [`Environment::toolchain_dir`]).
    pub fn provisioned_nvcc(&self) -> Vec<PathBuf> {
        provisioned_nvcc_in(self.toolchain_dir())
    }

    /// The NCCL headers kernels are compiled against: `WEFT_NCCL_INCLUDE` (authoritative: without `nccl.h`,
    /// that is the answer), else the first directory holding `nccl.h` among `NCCL_HOME/include`, the
    /// `include/` beside the loaded libnccl's `lib/` (as given, then with symlinks resolved), and
    /// `/usr/include`. Whether its release matches the library is for the caller to check.
    pub fn nccl_include(&self, loaded_library: Option<&Path>) -> Result<Candidate, Missing> {
        if let Some(dir) = &self.weft_nccl_include {
            return if dir.join("nccl.h").is_file() {
                Ok(Candidate { path: dir.clone(), origin: Origin::Variable("WEFT_NCCL_INCLUDE") })
            } else {
                Err(Missing::BadOverride {
                    variable: "WEFT_NCCL_INCLUDE",
                    path: dir.clone(),
                    problem: "holds no nccl.h (it must be NCCL's include directory)",
                })
            };
        }
        let mut candidates = Vec::new();
        if let Some(home) = &self.nccl_home {
            candidates.push(Candidate { path: home.join("include"), origin: Origin::Variable("NCCL_HOME") });
        }
        if let Some(library) = loaded_library {
            for library in [Some(library.to_path_buf()), fs::canonicalize(library).ok()].into_iter().flatten() {
                if let Some(dir) = library.parent().and_then(Path::parent).map(|root| root.join("include")) {
                    if !candidates.iter().any(|c| c.path == dir) {
                        candidates.push(Candidate { path: dir, origin: Origin::BesideLibrary });
                    }
                }
            }
        }
        candidates.push(Candidate { path: self.system_include.clone(), origin: Origin::System });
        first_existing(candidates, |dir| dir.join("nccl.h").is_file())
    }

    /// The kernel cache directory: `WEFT_CACHE_DIR`, else `<user cache dir>/weft/kernels`; `None` when neither
    /// exists (no `HOME`).
    pub fn cache_dir(&self) -> Option<CacheDir> {
        if let Some(dir) = &self.weft_cache_dir {
            return Some(CacheDir {
                dir: dir.clone(),
                owned_root: dir.clone(),
                origin: Origin::Variable("WEFT_CACHE_DIR"),
            });
        }
        let weft = self.user_cache_dir.as_ref()?.join("weft");
        Some(CacheDir { dir: weft.join("kernels"), owned_root: weft, origin: Origin::UserCacheDir })
    }
}

/// Where the kernel cache lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheDir {
    /// The directory holding the entries.
    pub dir: PathBuf,
    /// The topmost directory that is weft's own: `dir` for `WEFT_CACHE_DIR`, `<user cache dir>/weft` for the
    /// default location (its permissions are checked too).
    pub owned_root: PathBuf,
    /// Which setting chose it.
    pub origin: Origin,
}

/// A place something was looked for, and which setting or convention put it on the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The file or directory (for the dynamic linker's search, the bare soname).
    pub path: PathBuf,
    /// Why it was looked at.
    pub origin: Origin,
}

/// Which setting or convention produced a [`Candidate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// An environment variable (one of [`VARIABLES`]).
    Variable(&'static str),
    /// The `nvidia-nccl-cu*` pip wheel of the `python3` on `PATH`.
    PipWheel,
    /// The toolchain `cargo xtask provision` installs (`WEFT_TOOLCHAIN_DIR`).
    Provisioned,
    /// Beside the loaded libnccl (`lib/../include`).
    BesideLibrary,
    /// The dynamic linker's own search for `libnccl.so.2`.
    DynamicLinker,
    /// A fixed system location.
    System,
    /// The user's cache directory.
    UserCacheDir,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Variable(name) => f.write_str(name),
            Origin::PipWheel => f.write_str("the pip wheel of python3 (import nvidia.nccl)"),
            Origin::Provisioned => f.write_str("the provisioned toolchain"),
            Origin::BesideLibrary => f.write_str("beside the loaded libnccl"),
            Origin::DynamicLinker => f.write_str("the dynamic linker's search"),
            Origin::System => f.write_str("the system location"),
            Origin::UserCacheDir => f.write_str("the user cache directory"),
        }
    }
}

/// Why a search found nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// A variable that names the thing directly names something else; weft does not look elsewhere.
    BadOverride {
        /// The variable.
        variable: &'static str,
        /// Its value.
        path: PathBuf,
        /// What is wrong with that path.
        problem: &'static str,
    },
    /// Nothing in any place looked at.
    NotFound {
        /// Every place, in order.
        searched: Vec<PathBuf>,
    },
}

/// Where the toolchain `cargo xtask provision` installs into `toolchain_dir` keeps nvcc:
/// `venv/lib/python3*/site-packages/nvidia/cu13/bin/nvcc`, one per Python version present, in name order (or the
/// pattern itself when there is none, so a failure shows where the search looked).
pub fn provisioned_nvcc_in(toolchain_dir: &Path) -> Vec<PathBuf> {
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

/// `<workspace>/target/weft-toolchain`: the workspace is the directory above this crate.
fn default_toolchain_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).join("target").join("weft-toolchain")
}

/// The non-empty entries of a `PATH`-like list.
fn split(list: Option<&OsString>) -> Vec<PathBuf> {
    list.map(|l| std::env::split_paths(l).filter(|d| !d.as_os_str().is_empty()).collect()).unwrap_or_default()
}

fn first_existing(candidates: Vec<Candidate>, exists: impl Fn(&Path) -> bool) -> Result<Candidate, Missing> {
    match candidates.iter().position(|c| exists(&c.path)) {
        Some(found) => Ok(candidates.into_iter().nth(found).expect("position is in range")),
        None => Err(Missing::NotFound { searched: candidates.into_iter().map(|c| c.path).collect() }),
    }
}

/// The directory of the `nvidia-nccl-cu*` wheel installed for `python` (its `nvidia/nccl`), if any.
fn pip_nccl_wheel(python: &Path) -> Option<PathBuf> {
    let output = Command::new(python)
        .args(["-c", "import nvidia.nccl as m; print(list(m.__path__)[0])"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let root = String::from_utf8(output.stdout).ok()?;
    let root = PathBuf::from(root.trim());
    root.is_dir().then_some(root)
}

#[cfg(test)]
mod tests;
