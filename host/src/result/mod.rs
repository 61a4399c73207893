//! One function per NCCL call: resolves the symbol (a missing one is [`Error::Unsupported`]), calls it, and
//! turns its `ncclResult_t` into a `Result` carrying `ncclGetLastError`.
//!
//! Signatures are NCCL's, so most functions are `unsafe`: their `# Safety` sections list what NCCL needs and
//! the types cannot promise. The safe API in the rest of the crate is built only on these.

use std::ffi::CStr;

use crate::error::{Error, ResultCode};
use crate::sys::{self, ncclComm_t, ncclResult_t, Library};
use crate::version::Version;

mod collectives;
mod communicator;
mod device;

pub use collectives::*;
pub use communicator::*;
pub use device::*;

/// How a call that may run asynchronously (on a non-blocking communicator) came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an in-progress operation must be polled to completion"]
pub enum Progress {
    /// The operation completed.
    Done,
    /// `ncclInProgress`: the operation continues; poll `ncclCommGetAsyncError`.
    InProgress,
}

/// The symbol `call` of the loaded library, or `Unsupported` naming the release that introduced it.
fn symbol<'lib, F>(
    library: &Library,
    resolved: &'lib Result<F, libloading::Error>,
    call: &'static str,
    needs: Version,
) -> Result<&'lib F, Error> {
    resolved.as_ref().map_err(|_| Error::Unsupported { call, needs, found: library.version() })
}

/// Turns a status into `Progress` or an error that carries NCCL's description and last-error text.
fn check(library: &Library, call: &'static str, status: ncclResult_t, comm: ncclComm_t) -> Result<Progress, Error> {
    match status {
        ncclResult_t::ncclSuccess => Ok(Progress::Done),
        ncclResult_t::ncclInProgress => Ok(Progress::InProgress),
        failure => Err(failure_error(library, call, failure, comm)),
    }
}

/// [`check`] for calls that never run asynchronously: `ncclInProgress` is an error there.
fn check_done(library: &Library, call: &'static str, status: ncclResult_t, comm: ncclComm_t) -> Result<(), Error> {
    match status {
        ncclResult_t::ncclSuccess => Ok(()),
        failure => Err(failure_error(library, call, failure, comm)),
    }
}

fn failure_error(library: &Library, call: &'static str, status: ncclResult_t, comm: ncclComm_t) -> Error {
    Error::Nccl {
        call,
        code: ResultCode::from_raw(status.0 as i32),
        description: error_string(library, status.0 as i32),
        last_error: last_error(library, comm),
    }
}

/// `ncclGetErrorString(code)`: NCCL's one-line description of a result code.
pub fn error_string(library: &Library, code: i32) -> String {
    let Ok(get) = library.api.ncclGetErrorString.as_ref() else {
        return format!("ncclResult_t {code}");
    };
    // SAFETY: ncclGetErrorString accepts any integer and returns a pointer to a static string (never freed);
    // unknown codes get NCCL's generic text.
    let text = unsafe { get(ncclResult_t(code as u32)) };
    c_string(text)
}

/// `ncclGetLastError(comm)`: the text of the last error NCCL logged for `comm` (or globally, for null).
///
/// The comm argument is ignored by current NCCL releases, which keep one per-thread message; passing the
/// communicator keeps weft right if that changes.
pub fn last_error(library: &Library, comm: ncclComm_t) -> String {
    let Ok(get) = library.api.ncclGetLastError.as_ref() else {
        return String::new();
    };
    // SAFETY: ncclGetLastError reads no memory through `comm` (it may be null) and returns a pointer to a
    // thread-local buffer that stays valid until the next NCCL call on this thread; we copy it at once.
    let text = unsafe { get(comm) };
    c_string(text)
}

fn c_string(text: *const core::ffi::c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: NCCL returns NUL-terminated strings that live at least until the next NCCL call on this
    // thread; the text is copied before returning.
    unsafe { CStr::from_ptr(text) }.to_string_lossy().trim_end().to_owned()
}

/// `ncclGetVersion`.
pub fn get_version(library: &Library) -> Result<Version, Error> {
    let get = symbol(library, &library.api.ncclGetVersion, "ncclGetVersion", Version::new(2, 0, 0))?;
    let mut code = 0;
    // SAFETY: writes one int through a pointer to a live local.
    let status = unsafe { get(&mut code) };
    check_done(library, "ncclGetVersion", status, std::ptr::null_mut())?;
    Ok(Version::from_code(code))
}

/// `ncclGetUniqueId`.
pub fn get_unique_id(library: &Library) -> Result<sys::ncclUniqueId, Error> {
    let get = symbol(library, &library.api.ncclGetUniqueId, "ncclGetUniqueId", Version::new(2, 0, 0))?;
    let mut id = sys::ncclUniqueId { internal: [0; 128] };
    // SAFETY: writes NCCL_UNIQUE_ID_BYTES bytes into a live, correctly sized struct.
    let status = unsafe { get(&mut id) };
    check_done(library, "ncclGetUniqueId", status, std::ptr::null_mut())?;
    Ok(id)
}

/// `ncclMemAlloc`: `size` bytes of VMM device memory on the current CUDA device, suitable for windows.
///
/// # Safety
/// The CUDA context of the device the memory is meant for must be current on this thread.
pub unsafe fn mem_alloc(library: &Library, size: usize) -> Result<*mut core::ffi::c_void, Error> {
    let alloc = symbol(library, &library.api.ncclMemAlloc, "ncclMemAlloc", Version::new(2, 19, 0))?;
    let mut ptr = std::ptr::null_mut();
    // SAFETY: writes one pointer through a pointer to a live local; the caller made the context current.
    let status = unsafe { alloc(&mut ptr, size) };
    check_done(library, "ncclMemAlloc", status, std::ptr::null_mut())?;
    if ptr.is_null() && size > 0 {
        return Err(Error::invalid("size", format!("ncclMemAlloc returned NULL for {size} bytes")));
    }
    Ok(ptr)
}

/// `ncclMemFree`.
///
/// # Safety
/// `ptr` came from [`mem_alloc`] of the same library, is not registered anywhere any more, no kernel or
/// copy using it is running, and it is not freed twice.
pub unsafe fn mem_free(library: &Library, ptr: *mut core::ffi::c_void) -> Result<(), Error> {
    let free = symbol(library, &library.api.ncclMemFree, "ncclMemFree", Version::new(2, 19, 0))?;
    // SAFETY: the caller guarantees `ptr` is a live ncclMemAlloc allocation nobody uses any more.
    let status = unsafe { free(ptr) };
    check_done(library, "ncclMemFree", status, std::ptr::null_mut())
}

/// `ncclGroupStart`.
pub fn group_start(library: &Library) -> Result<(), Error> {
    let start = symbol(library, &library.api.ncclGroupStart, "ncclGroupStart", Version::new(2, 0, 0))?;
    // SAFETY: no arguments; group calls only touch NCCL's thread-local group state.
    let status = unsafe { start() };
    check_done(library, "ncclGroupStart", status, std::ptr::null_mut())
}

/// `ncclGroupEnd`. May return [`Progress::InProgress`] when the group holds non-blocking communicators.
pub fn group_end(library: &Library) -> Result<Progress, Error> {
    let end = symbol(library, &library.api.ncclGroupEnd, "ncclGroupEnd", Version::new(2, 0, 0))?;
    // SAFETY: no arguments; the operations queued since ncclGroupStart were validated when queued.
    let status = unsafe { end() };
    check(library, "ncclGroupEnd", status, std::ptr::null_mut())
}
