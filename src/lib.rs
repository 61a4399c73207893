//! weft: fused compute–communication GPU kernels for distributed training, written in Rust on NCCL's
//! device API.
//!
//! - [`host`] — the typestate runtime over NCCL and CUDA: communicators, collectives, windows, device
//!   communicators, the kernel JIT.
//! - [`device`] — the kernel vocabulary rustc type-checks kernel bodies against.
//! - [`kernel`] / [`device_fn`] — the attributes that turn Rust functions into CUDA C++ kernels with typed
//!   launchers.
//!
//! `use weft::prelude::*;` brings the kernel vocabulary (device-side `DevComm`, `Window`, coops, barriers, …),
//! the attributes and the host items a program usually needs under names that do not clash with it. The
//! host's own `DevComm` and `Window` are `weft::host::DevComm` and `weft::host::Window`.

pub use weft_device as device;
pub use weft_host as host;
/// cudarc, the CUDA driver API weft uses for streams and buffers: the same version weft was built with.
pub use weft_host::cudarc;
pub use weft_macros::{device_fn, kernel};

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

/// The kernel vocabulary, the attributes and the common host items.
pub mod prelude {
    pub use weft_device::prelude::*;
    pub use weft_host::{
        local_devices, spmd, Communicator, Config, DeviceBuffer, Graph, LaunchConfig, ReduceOp, Requirements, UniqueId,
        WindowFlags,
    };
    pub use weft_macros::{device_fn, kernel};
}
