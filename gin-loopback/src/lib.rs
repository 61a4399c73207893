//! A loopback RMA backend for NCCL's GIN proxy: GPU-initiated networking (put, put-with-signal, get, flush;
//! NCCL's counters and GIN barriers on top) between ranks that are threads of one process, with no network card.
//!
//! NCCL runs GIN on a CPU proxy over an RMA plugin (`ncclRmaPlugin_v14`): kernels write descriptors into host
//! queues, NCCL's proxy thread reads them and calls the plugin. This crate is such a plugin. It exists so that GIN
//! kernels execute on one machine — a correctness harness for weft's GIN vocabulary, never a network: its latency
//! and bandwidth say nothing about a real one.
//!
//! Turn it on by pointing NCCL at the library before the first communicator is created:
//!
//! ```sh
//! NCCL_RMA_PLUGIN=/path/to/libweft_gin_loopback.so
//! ```
//!
//! With several ranks of one communicator on one GPU (NCCL ≥ 2.30, `NCCL_MULTI_RANK_GPU_ENABLE=1`), every rank is in
//! one LSA team and GIN's rail team has one rank; `NCCL_LSA_TEAM_SIZE=k` splits the ranks into LSA teams of `k`, so
//! that rail teams span the rest (docs/gin.md).
//!
//! What it does: a put is a copy on a non-blocking CUDA stream of the rank's context (see `cuda`), a signal an exact
//! addition to a 64-bit word after the put's data, a flush a marker on that stream. Every offset is checked against
//! the target rank's registration: an access past its end is refused with an error, never made. What it refuses:
//! ranks in several processes, DMA-BUF registrations, memory that is neither host nor CUDA.

#![warn(missing_docs)]

mod cuda;
mod engine;
mod error;
mod ffi;
mod group;
#[cfg(test)]
mod host_engine;
mod log;
mod plugin;
#[cfg(test)]
mod tests;

pub use ffi::RmaV14;
pub use plugin::ncclRmaPlugin_v14;
