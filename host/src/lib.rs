//! weft-host: the safe, typestate runtime over NCCL (loaded at run time) and CUDA (through cudarc).

#![warn(missing_docs)]

pub mod jit;
pub mod launch;

pub mod error;
pub mod result;
pub mod sys;
pub mod version;

pub use error::{Error, ResultCode};
pub use version::Version;
