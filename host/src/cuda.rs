//! Checking for the CUDA driver before cudarc needs it.
//!
//! cudarc loads libcuda on first use and panics when it cannot; weft asks first, so a machine without a GPU
//! driver gets [`Error::NoCudaDriver`] with the fix instead of a panic.

use std::sync::OnceLock;

use crate::error::Error;

/// Whether the CUDA driver library can be loaded (checked once per process, with the names cudarc uses).
pub fn driver() -> Result<(), Error> {
    static FOUND: OnceLock<Result<(), String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let candidates: Vec<String> =
                ["cuda", "nvcuda"].iter().flat_map(|name| cudarc::get_lib_name_candidates(name)).collect();
            for candidate in &candidates {
                // SAFETY: loading libcuda runs only the driver's own initialisers; the handle is dropped at
                // once (cudarc loads its own), so no symbol is ever called through it.
                if unsafe { libloading::Library::new(candidate) }.is_ok() {
                    return Ok(());
                }
            }
            Err(format!("libcuda.so, libcuda.so.1 and {} other names cudarc knows", candidates.len().saturating_sub(2)))
        })
        .clone()
        .map_err(|tried| Error::NoCudaDriver { tried })
}

/// The number of CUDA devices the driver reports; [`Error::NoCudaDriver`] when there is no driver.
pub fn device_count() -> Result<usize, Error> {
    driver()?;
    let count = cudarc::driver::CudaContext::device_count()?;
    Ok(usize::try_from(count).unwrap_or(0))
}
