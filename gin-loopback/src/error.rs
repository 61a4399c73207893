//! The one error type: an NCCL result code and what went wrong, logged as a warning where the call returns to NCCL.

use std::fmt;

use crate::ffi::{self, NcclResult};

/// A failed call: the code NCCL gets back and the message it logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Error {
    pub(crate) code: NcclResult,
    pub(crate) message: String,
}

impl Error {
    /// Something NCCL (or a peer's setup) asked that this backend cannot do.
    pub(crate) fn usage(message: impl Into<String>) -> Error {
        Error { code: ffi::INVALID_USAGE, message: message.into() }
    }

    /// An argument out of range: an offset past a registration, an unknown rank or signal operation.
    pub(crate) fn argument(message: impl Into<String>) -> Error {
        Error { code: ffi::INVALID_ARGUMENT, message: message.into() }
    }

    /// A CUDA call failed.
    pub(crate) fn cuda(call: &str, code: impl fmt::Debug) -> Error {
        Error { code: ffi::UNHANDLED_CUDA_ERROR, message: format!("{call} failed: {code:?}") }
    }

    /// The process or its peers did not do what this backend waited for.
    pub(crate) fn system(message: impl Into<String>) -> Error {
        Error { code: ffi::SYSTEM_ERROR, message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

pub(crate) type Result<T> = std::result::Result<T, Error>;
