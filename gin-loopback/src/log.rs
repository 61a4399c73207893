//! Messages through NCCL's logger, so that they appear with NCCL's own (`NCCL_DEBUG=WARN|INFO`) and a warning
//! becomes the text of `ncclGetLastError`, which weft puts into its errors.

use std::ffi::{c_char, CString};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::ffi::{self, DebugLogger};

/// NCCL's logger as an address; 0 until the first `init`. NCCL passes the same function to every `init`.
static LOGGER: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn set(logger: DebugLogger) {
    if let Some(function) = logger {
        LOGGER.store(function as usize, Ordering::Release);
    }
}

pub(crate) fn warn(message: &str) {
    emit(ffi::LOG_WARN, message);
}

pub(crate) fn info(message: &str) {
    emit(ffi::LOG_INFO, message);
}

fn emit(level: std::ffi::c_int, message: &str) {
    let text = CString::new(format!("weft loopback GIN: {message}").replace('\0', " ")).unwrap_or_default();
    let address = LOGGER.load(Ordering::Acquire);
    if address == 0 {
        if level == ffi::LOG_WARN {
            eprintln!("{}", text.to_string_lossy());
        }
        return;
    }
    type Logger =
        unsafe extern "C" fn(std::ffi::c_int, std::ffi::c_ulong, *const c_char, std::ffi::c_int, *const c_char, ...);
    // SAFETY: the address was stored from a non-null `ncclDebugLogger_t` NCCL passed to `init`, whose type is
    // `Logger`; NCCL's logger lives as long as libnccl, which outlives every call into this backend.
    let logger: Logger = unsafe { std::mem::transmute::<usize, Logger>(address) };
    // SAFETY: the format is "%s" with one C-string argument that outlives the call; file is a static C string.
    unsafe { logger(level, ffi::LOG_FLAGS, c"weft-gin-loopback".as_ptr(), 0, c"%s".as_ptr(), text.as_ptr()) };
}
