//! Finding and opening libnccl.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::bindings::{ncclResult_t, Nccl};
use crate::discovery::{Environment, Origin};
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
/// Search order ([`Environment::libnccl_candidates`]): `WEFT_LIBNCCL` (a file; when set, nothing else is
/// tried), `NCCL_HOME/lib`, each directory of `LD_LIBRARY_PATH`, the pip wheel's `nvidia/nccl/lib` (found
/// through `python3 -c 'import nvidia.nccl'`), then the dynamic linker's own search for `libnccl.so.2`
/// (ld.so.cache, system directories). The first that opens and answers `ncclGetVersion` wins.
pub fn library() -> Result<&'static Library, Error> {
    static LIBRARY: OnceLock<Result<Library, Vec<LoadAttempt>>> = OnceLock::new();
    LIBRARY
        .get_or_init(|| {
            // Every NCCL program loads the library first: the place to honour WEFT_STACKS (crate::stacks).
            crate::stacks::install_from_env();
            let search = search(&Environment::from_process());
            search.found.map(|(library, _)| library).ok_or(search.failed)
        })
        .as_ref()
        .map_err(|tried| Error::LibraryNotFound { tried: tried.clone() })
}

/// What the search for libnccl found: the library it would use, and every candidate before it that failed.
#[derive(Debug)]
pub struct Search {
    /// The library the process would use, and which setting led to it.
    pub found: Option<(Library, Origin)>,
    /// Each candidate that exists (or is a bare soname) but could not be used, in order.
    pub failed: Vec<LoadAttempt>,
}

/// Searches for libnccl in `env` exactly as [`library`] does, stopping at the first library that opens, and
/// without making it the process-wide one. `cargo xtask doctor` reports this.
pub fn search(env: &Environment) -> Search {
    let mut failed = Vec::new();
    for candidate in env.libnccl_candidates() {
        // A path whose file is absent was merely a place to look; a bare soname goes to the dynamic linker, and
        // an explicit WEFT_LIBNCCL that is missing is an answer of its own.
        let explicit = candidate.origin == Origin::Variable("WEFT_LIBNCCL");
        if candidate.path.components().count() > 1 && !candidate.path.exists() && !explicit {
            continue;
        }
        match Library::open(&candidate.path) {
            Ok(library) => {
                tracing::debug!(path = %library.path.display(), version = %library.version, "opened libnccl");
                return Search { found: Some((library, candidate.origin)), failed };
            }
            Err(Error::LibraryNotFound { tried: attempts }) => failed.extend(attempts),
            Err(other) => {
                failed.push(LoadAttempt { path: candidate.path.display().to_string(), error: other.to_string() })
            }
        }
        if explicit {
            if let Some(last) = failed.last_mut() {
                last.error.push_str(" (WEFT_LIBNCCL is set, so nothing else was tried: fix it or unset it)");
            }
        }
    }
    Search { found: None, failed }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::LIBNCCL_SONAME;

    /// The pip wheel's libnccl 2.28.9 that `cargo xtask test` provisions (it loads without a GPU).
    fn real_libnccl() -> PathBuf {
        std::env::var_os("WEFT_TEST_LIBNCCL_2_28_9").map(PathBuf::from).unwrap_or_else(|| {
            panic!("WEFT_TEST_LIBNCCL_2_28_9 is not set: run the tests through `cargo xtask test`, which provisions libnccl")
        })
    }

    #[test]
    fn the_search_takes_the_first_library_that_opens_and_reports_the_rest() {
        let real = real_libnccl();
        let root = tempfile::tempdir().unwrap();
        let broken = root.path().join("broken");
        std::fs::create_dir_all(&broken).unwrap();
        std::fs::write(broken.join(LIBNCCL_SONAME), "not a shared object").unwrap();
        let mut env = Environment::isolated(root.path());
        // NCCL_HOME without a library is skipped silently; a broken file on LD_LIBRARY_PATH is reported and
        // passed over; the next directory's library is the one.
        env.nccl_home = Some(root.path().join("empty-home"));
        env.ld_library_path =
            Some(std::env::join_paths([broken.clone(), real.parent().unwrap().to_path_buf()]).unwrap());
        let search = search(&env);
        let (library, origin) = search.found.expect("the real libnccl");
        assert_eq!((library.version(), origin), (Version::new(2, 28, 9), Origin::Variable("LD_LIBRARY_PATH")));
        assert_eq!(library.path(), std::fs::canonicalize(&real).unwrap());
        assert_eq!(search.failed.len(), 1, "{:?}", search.failed);
        assert!(search.failed[0].path.contains("broken"), "{:?}", search.failed);

        // NCCL_HOME is the wheel's nvidia/nccl: its lib/ is searched first.
        env.nccl_home = Some(real.parent().unwrap().parent().unwrap().to_path_buf());
        assert_eq!(search_origin(&env), Some(Origin::Variable("NCCL_HOME")));
    }

    #[test]
    fn weft_libnccl_is_the_answer_even_when_wrong() {
        let real = real_libnccl();
        let root = tempfile::tempdir().unwrap();
        let mut env = Environment::isolated(root.path());
        env.weft_libnccl = Some(real.clone());
        env.ld_library_path = Some(root.path().as_os_str().to_owned());
        assert_eq!(search_origin(&env), Some(Origin::Variable("WEFT_LIBNCCL")));

        // A working library elsewhere does not stand in for a wrong WEFT_LIBNCCL.
        env.weft_libnccl = Some(root.path().join("missing/libnccl.so.2"));
        env.nccl_home = Some(real.parent().unwrap().parent().unwrap().to_path_buf());
        let search = search(&env);
        assert!(search.found.is_none());
        let [attempt] = &search.failed[..] else { panic!("{:?}", search.failed) };
        assert!(attempt.path.contains("missing") && attempt.error.contains("fix it or unset it"), "{attempt:?}");
        let error = Error::LibraryNotFound { tried: search.failed };
        assert!(error.to_string().contains("WEFT_LIBNCCL is set"), "{error}");
    }

    fn search_origin(env: &Environment) -> Option<Origin> {
        search(env).found.map(|(_, origin)| origin)
    }
}
