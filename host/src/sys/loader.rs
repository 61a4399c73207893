//! Finding and opening libnccl.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::bindings::{ncclResult_t, Nccl};
use crate::error::{Error, LoadAttempt};
use crate::version::Version;

/// The opened libnccl: its symbol table, where it came from and which version it is.
pub struct Library {
    pub(crate) api: Nccl,
    path: PathBuf,
    version: Version,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library").field("path", &self.path).field("version", &self.version).finish()
    }
}

impl Library {
    /// Opens the libnccl at `path` and reads its version.
    ///
    /// Most code wants [`library`], which searches the usual places once per process. Opening a second,
    /// different libnccl in one process is allowed (tests compare versions this way), but communicators
    /// created through one must never be handed to the other.
    pub fn open(path: impl AsRef<Path>) -> Result<Library, Error> {
        let path = path.as_ref();
        // SAFETY: loading libnccl runs its ELF initialisers, which only set up NCCL's own globals; every
        // symbol is typed from NCCL's headers by bindgen, so a found symbol has the signature we call.
        let api = unsafe { Nccl::new(path) }.map_err(|source| Error::LibraryNotFound {
            tried: vec![LoadAttempt { path: path.display().to_string(), error: source.to_string() }],
        })?;
        let get_version = api.ncclGetVersion.as_ref().map_err(|_| Error::LibraryNotFound {
            tried: vec![LoadAttempt {
                path: path.display().to_string(),
                error: "not an NCCL library: it has no ncclGetVersion".into(),
            }],
        })?;
        let mut code = 0;
        // SAFETY: ncclGetVersion writes one int through the pointer, which points at a live local.
        let status = unsafe { get_version(&mut code) };
        if status != ncclResult_t::ncclSuccess {
            return Err(Error::LibraryNotFound {
                tried: vec![LoadAttempt {
                    path: path.display().to_string(),
                    error: format!("ncclGetVersion failed with {status:?}"),
                }],
            });
        }
        let path = resolved_path(path).unwrap_or_else(|| path.to_path_buf());
        Ok(Library { api, path, version: Version::from_code(code) })
    }

    /// The raw symbol table (each entry an `Err` where the library lacks the symbol), for code that must
    /// call NCCL directly, such as benchmarks comparing weft against the bare call.
    pub fn symbols(&self) -> &Nccl {
        &self.api
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version the library reports through `ncclGetVersion`.
    pub fn version(&self) -> Version {
        self.version
    }
}

/// The process-wide libnccl, opened on first use.
///
/// Search order: `WEFT_LIBNCCL` (a file), `NCCL_HOME/lib`, each directory of `LD_LIBRARY_PATH`, the pip
/// wheel's `nvidia/nccl/lib` (found through `python3 -c 'import nvidia.nccl'`), then the dynamic linker's
/// own search for `libnccl.so.2` (ld.so.cache, system directories).
pub fn library() -> Result<&'static Library, Error> {
    static LIBRARY: OnceLock<Result<Library, Vec<LoadAttempt>>> = OnceLock::new();
    LIBRARY.get_or_init(search).as_ref().map_err(|tried| Error::LibraryNotFound { tried: tried.clone() })
}

const SONAME: &str = "libnccl.so.2";

fn search() -> Result<Library, Vec<LoadAttempt>> {
    let mut tried = Vec::new();
    for candidate in candidates() {
        if candidate.components().count() > 1 && !candidate.exists() {
            continue;
        }
        match Library::open(&candidate) {
            Ok(library) => {
                tracing::debug!(path = %library.path.display(), version = %library.version, "opened libnccl");
                return Ok(library);
            }
            Err(Error::LibraryNotFound { tried: mut attempts }) => tried.append(&mut attempts),
            Err(other) => tried.push(LoadAttempt { path: candidate.display().to_string(), error: other.to_string() }),
        }
    }
    Err(tried)
}

fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(file) = std::env::var_os("WEFT_LIBNCCL") {
        out.push(PathBuf::from(file));
    }
    if let Some(home) = std::env::var_os("NCCL_HOME") {
        out.push(Path::new(&home).join("lib").join(SONAME));
    }
    if let Some(dirs) = std::env::var_os("LD_LIBRARY_PATH") {
        out.extend(std::env::split_paths(&dirs).filter(|d| !d.as_os_str().is_empty()).map(|d| d.join(SONAME)));
    }
    if let Some(dir) = pip_wheel_lib_dir() {
        out.push(dir.join(SONAME));
    }
    out.push(PathBuf::from(SONAME));
    out
}

/// The `lib` directory of the `nvidia-nccl-cu*` wheel installed for the default `python3`, if any.
fn pip_wheel_lib_dir() -> Option<PathBuf> {
    let output = std::process::Command::new("python3")
        .args(["-c", "import nvidia.nccl as m; print(list(m.__path__)[0])"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let root = String::from_utf8(output.stdout).ok()?;
    Some(Path::new(root.trim()).join("lib"))
}

/// The file the dynamic linker actually mapped for `requested` (a bare soname resolves through the linker's
/// search, so the path is only known after the fact).
fn resolved_path(requested: &Path) -> Option<PathBuf> {
    if requested.components().count() > 1 {
        return std::fs::canonicalize(requested).ok();
    }
    let name = requested.file_name()?.to_str()?;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.ends_with(name) || Path::new(path).file_name().is_some_and(|f| f == name))
        .map(PathBuf::from)
}
