//! weft: fused compute–communication GPU kernels for distributed training, written in Rust on NCCL's
//! device API. This facade re-exports the host runtime, the kernel vocabulary and the kernel macros.

pub use weft_device as device;
pub use weft_host as host;
