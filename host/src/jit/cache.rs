//! The on-disk cubin cache and its in-process memo.
//!
//! Layout under the cache directory (see `docs/jit.md`):
//! - `<key>.cubin`: the cubin followed by a 48-byte trailer (magic, length, SHA-256 of the cubin);
//! - `include/<hash of weft.cuh>/weft.cuh`: the device header, one directory per distinct text;
//! - `src/<kernel>-<key prefix>.cu` (and `.cu.log` after a failure): the source nvcc was given.
//!
//! Every file is written to a unique temporary name in its final directory, synced, then renamed over the
//! final name, so readers never see a partial file and concurrent writers of one key just replace each other's
//! identical result.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::compile::{file_stem, run_nvcc, CacheOrigin, CompileRequest, CompiledKernel};
use super::elf;
use super::{JitError, Toolchain};
use crate::discovery::Environment;

/// Bumped whenever the key's inputs or the entry format change, so old entries are simply never looked up.
const FORMAT: &str = "weft-kernel-cache-v1";
const TRAILER_MAGIC: &[u8; 8] = b"WEFTCUB1";
const TRAILER_LEN: usize = 8 + 8 + 32;

/// The SHA-256 that names a cache entry: of the source, weft.cuh, nvcc's flags and version, the NCCL release
/// and the architecture.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey([u8; 32]);

impl CacheKey {
    /// The key of `req` compiled by `tc`.
    pub fn new(tc: &Toolchain, req: &CompileRequest<'_>) -> CacheKey {
        let mut hasher = Sha256::new();
        let mut field = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        };
        field(FORMAT.as_bytes());
        field(req.source.as_bytes());
        field(req.weft_header.as_bytes());
        for flag in req.flags() {
            field(flag.as_bytes());
        }
        field(tc.nvcc_version.as_bytes());
        field(&tc.nccl_version.code.to_le_bytes());
        field(req.arch.to_string().as_bytes());
        CacheKey(hasher.finalize().into())
    }

    /// The key in lowercase hex (64 characters).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheKey({})", self.to_hex())
    }
}

/// One kernel's slot in the memo; its mutex also keeps two threads from compiling the same key at once.
type Slot = Arc<Mutex<Option<Arc<[u8]>>>>;

/// Compiled kernels on disk, plus an in-process memo so a kernel is read or compiled once per process.
///
/// The directory is private: created mode 0700 on first use, and refused ([`JitError::CacheDirInsecure`]) if it,
/// or a directory above it that weft created, belongs to another user or is writable by group or others.
#[derive(Debug)]
pub struct KernelCache {
    dir: PathBuf,
    /// The top of the directories weft owns around `dir`: `dir` itself, or `<user cache dir>/weft`.
    owned_root: PathBuf,
    /// Set once the directory has been created or found, and judged private.
    private: OnceLock<()>,
    memo: Mutex<HashMap<CacheKey, Slot>>,
}

impl KernelCache {
    /// A cache in `dir` (created, mode 0700, on first use).
    pub fn new(dir: impl Into<PathBuf>) -> KernelCache {
        let dir = dir.into();
        KernelCache::with_owned_root(dir.clone(), dir)
    }

    pub(crate) fn with_owned_root(dir: PathBuf, owned_root: PathBuf) -> KernelCache {
        KernelCache { dir, owned_root, private: OnceLock::new(), memo: Mutex::new(HashMap::new()) }
    }

    /// The cache in `WEFT_CACHE_DIR`, else `<user cache dir>/weft/kernels` (`~/.cache/weft/kernels` on Linux).
    pub fn from_env() -> Result<KernelCache, JitError> {
        KernelCache::from_environment(&Environment::from_process())
    }

    /// The cache [`Environment::cache_dir`] names (what [`KernelCache::from_env`] uses), not yet created.
    pub fn from_environment(env: &Environment) -> Result<KernelCache, JitError> {
        let location = env.cache_dir().ok_or(JitError::NoCacheDir)?;
        Ok(KernelCache::with_owned_root(location.dir, location.owned_root))
    }

    /// Checks the directory without creating anything: `Ok(true)` if it exists and is private, `Ok(false)` if
    /// it does not exist yet (the first compile creates it, mode 0700), else why it would be refused. This is
    /// the check every use of the cache makes first (`cargo xtask doctor` shows it).
    pub fn check_dir(&self) -> Result<bool, JitError> {
        private::check(&self.dir, &self.owned_root)
    }

    /// Creates the directory if needed and checks it is private, once per cache object while it stays so.
    fn ensure_private(&self) -> Result<(), JitError> {
        if self.private.get().is_none() {
            private::ensure(&self.dir, &self.owned_root)?;
            let _ = self.private.set(());
        }
        Ok(())
    }

    /// The process-wide cache ([`KernelCache::from_env`], created on first use).
    pub fn global() -> Result<&'static KernelCache, JitError> {
        static GLOBAL: OnceLock<KernelCache> = OnceLock::new();
        if let Some(cache) = GLOBAL.get() {
            return Ok(cache);
        }
        let cache = KernelCache::from_env()?;
        Ok(GLOBAL.get_or_init(|| cache))
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the entry for `key` lives.
    pub fn entry_path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{key}.cubin"))
    }

    /// The cubin for `req`: from this process's memo, else from disk (verified), else compiled with nvcc and
    /// stored. A disk entry that is truncated, fails its checksum or is not a well-formed cubin is logged, removed
    /// and recompiled; nvcc output that is not a well-formed cubin is [`JitError::MalformedCubin`].
    pub fn get_or_compile(&self, tc: &Toolchain, req: &CompileRequest<'_>) -> Result<CompiledKernel, JitError> {
        // A request that leaves the GEMM mainloop to `WEFT_GEMM_MAINLOOP` takes it from a valid value only.
        if req.gemm_mainloop.is_none() {
            super::compile::gemm_mainloop()?;
        }
        let started = Instant::now();
        let key = CacheKey::new(tc, req);
        let slot = self.memo.lock().unwrap_or_else(PoisonError::into_inner).entry(key).or_default().clone();
        let mut cached = slot.lock().unwrap_or_else(PoisonError::into_inner);
        let stem = format!("{}-{}", file_stem(req.name), &key.to_hex()[..16]);
        let source_path = self.dir.join("src").join(format!("{stem}.cu"));
        let path = self.entry_path(&key);
        let done = |cubin: Arc<[u8]>, origin| CompiledKernel {
            name: req.name.to_string(),
            key,
            arch: req.arch,
            cubin,
            path: path.clone(),
            source_path: source_path.clone(),
            origin,
            duration: started.elapsed(),
        };
        if let Some(cubin) = cached.as_ref() {
            return Ok(done(cubin.clone(), CacheOrigin::Memory));
        }
        // Before anything is read from disk: a planted entry would carry a valid checksum.
        self.ensure_private()?;
        if print_cuda_requested() {
            eprintln!("// ===== weft: kernel `{}` ({}, key {key}) =====\n{}", req.name, req.arch, req.source);
        }
        if let Some(cubin) = self.read_entry(&path) {
            let cubin: Arc<[u8]> = cubin.into();
            *cached = Some(cubin.clone());
            let kernel = done(cubin, CacheOrigin::Disk);
            tracing::debug!(
                "kernel `{}` for {}: cache hit ({}), read in {:.2} ms",
                req.name,
                req.arch,
                path.display(),
                kernel.duration.as_secs_f64() * 1e3
            );
            return Ok(kernel);
        }

        tracing::info!("compiling kernel `{}` for {} {:?} (cache miss)…", req.name, req.arch, req.extra_flags);
        let header_dir = self.write_header(req.weft_header)?;
        write_atomically(&source_path, req.source.as_bytes())?;
        let output = unique_temp_path(&self.dir, &format!("{stem}.nvcc.cubin"));
        let compiled = run_nvcc(tc, req, &header_dir, &source_path, &output)
            .and_then(|()| fs::read(&output).map_err(|e| io_error("read nvcc's output", &output, e)));
        let cubin = match compiled.map(|cubin| (elf::check_cubin(&cubin), cubin)) {
            Ok((Ok(()), cubin)) => cubin,
            Ok((Err(problem), _)) => {
                // Kept for inspection beside the source, like nvcc's log after a failure.
                let kept = source_path.with_extension("malformed.cubin");
                let path = if fs::rename(&output, &kept).is_ok() { kept } else { output.clone() };
                return Err(JitError::MalformedCubin { kernel: req.name.to_string(), path, problem });
            }
            Err(e) => {
                let _ = fs::remove_file(&output);
                return Err(e);
            }
        };
        let _ = fs::remove_file(&output);
        write_atomically(&path, &encode_entry(&cubin))?;
        let cubin: Arc<[u8]> = cubin.into();
        *cached = Some(cubin.clone());
        let kernel = done(cubin, CacheOrigin::Compiled);
        tracing::info!("compiled `{}` in {:.1} s", req.name, kernel.duration.as_secs_f64());
        Ok(kernel)
    }

    /// The verified cubin stored at `path`, or `None` (absent, unreadable or corrupt: all mean "compile").
    fn read_entry(&self, path: &Path) -> Option<Vec<u8>> {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!("kernel cache entry {} is unreadable ({e}); recompiling", path.display());
                return None;
            }
        };
        // The checksum only proves the bytes are what was stored; the ELF check that they are safe to give the
        // driver (a malformed cubin can crash it), whoever stored them.
        match decode_entry(&bytes).and_then(|cubin| elf::check_cubin(cubin).map(|()| cubin)) {
            Ok(cubin) => Some(cubin.to_vec()),
            Err(problem) => {
                tracing::warn!("kernel cache entry {} is corrupt ({problem}); recompiling", path.display());
                if let Err(e) = fs::remove_file(path) {
                    tracing::debug!("could not remove corrupt entry {}: {e}", path.display());
                }
                None
            }
        }
    }

    /// Writes `weft.cuh` into `include/<hash>/` (unless already there with this text) and returns that dir.
    fn write_header(&self, text: &str) -> Result<PathBuf, JitError> {
        let hash = hex::encode(Sha256::digest(text.as_bytes()));
        let dir = self.dir.join("include").join(&hash[..16]);
        let file = dir.join(weft_device::WEFT_CUH_NAME);
        if fs::read(&file).is_ok_and(|existing| existing == text.as_bytes()) {
            return Ok(dir);
        }
        write_atomically(&file, text.as_bytes())?;
        Ok(dir)
    }
}

/// Whether `WEFT_PRINT_CUDA` asks for generated sources on stderr.
fn print_cuda_requested() -> bool {
    std::env::var_os("WEFT_PRINT_CUDA").is_some_and(|v| !v.is_empty() && v != "0")
}

/// The stored form of a cubin: the cubin, then `WEFTCUB1`, its length (u64 LE) and its SHA-256. The trailer
/// sits after the ELF image so the entry stays readable by `cuobjdump` and friends.
pub(crate) fn encode_entry(cubin: &[u8]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(cubin.len() + TRAILER_LEN);
    entry.extend_from_slice(cubin);
    entry.extend_from_slice(TRAILER_MAGIC);
    entry.extend_from_slice(&(cubin.len() as u64).to_le_bytes());
    entry.extend_from_slice(&Sha256::digest(cubin));
    entry
}

/// The cubin inside a stored entry, or why the entry cannot be trusted.
pub(crate) fn decode_entry(entry: &[u8]) -> Result<&[u8], String> {
    let Some(body_len) = entry.len().checked_sub(TRAILER_LEN) else {
        return Err(format!("{} bytes, shorter than its trailer", entry.len()));
    };
    let (cubin, trailer) = entry.split_at(body_len);
    let (magic, rest) = trailer.split_at(8);
    let (length, digest) = rest.split_at(8);
    if magic != TRAILER_MAGIC {
        return Err("no weft trailer (truncated or not written by weft)".into());
    }
    let length = u64::from_le_bytes(length.try_into().expect("8 bytes"));
    if length != body_len as u64 {
        return Err(format!("trailer says {length} bytes but {body_len} are present"));
    }
    if Sha256::digest(cubin).as_slice() != digest {
        return Err("SHA-256 of the cubin does not match its trailer".into());
    }
    Ok(cubin)
}

fn io_error(action: &'static str, path: &Path, source: std::io::Error) -> JitError {
    JitError::CacheIo { action, path: path.to_path_buf(), source }
}

/// A name in `dir` no other thread or process is using: `.<name>.<pid>.<counter>.<nanos>.tmp`.
fn unique_temp_path(dir: &Path, name: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    dir.join(format!(".{name}.{}.{n}.{nanos}.tmp", std::process::id()))
}

/// Writes `bytes` to `path` so that readers see either the old file or the complete new one.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), JitError> {
    let dir = path.parent().expect("cache paths have a parent");
    private::create_inside(dir).map_err(|e| io_error("create directory", dir, e))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = unique_temp_path(dir, &name);
    // No fsync, of the file or of the directory: a cache needs atomicity (the rename: a reader sees the old file
    // or the whole new one), not durability. After a crash a torn or empty entry fails its checksum or ELF check
    // and is compiled again, and a header or source that differs is rewritten. Two fsyncs per file, three files
    // per cold compile, were the cache's only costly step besides nvcc (the suspected cause of the 12-24% cold
    // compile overhead over nvcc alone measured on the GPU machine: bench/RESULTS.md).
    let written = (|| {
        let mut file = fs::OpenOptions::new().write(true).create_new(true).open(&temp)?;
        file.write_all(bytes)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(io_error("write", &temp, e));
    }
    if let Err(e) = fs::rename(&temp, path) {
        let _ = fs::remove_file(&temp);
        return Err(io_error("rename a temporary file onto", path, e));
    }
    Ok(())
}

mod private;
#[cfg(test)]
mod tests;
