//! What weft's examples, benchmarks and GPU tests share, in one crate instead of files included by path: the
//! examples' kernels ([`kernels`]) and the tests' ([`test_kernels`]) — `tests/codegen.rs` compiles every one of them
//! against each NCCL release's headers — the hand-written baselines' CUDA C++ ([`baselines`]), the examples' host
//! helpers ([`common`]), the unfused MoE run the MoE example and benchmark share ([`moe_unfused`]), the benchmarks'
//! spin kernel ([`spin`]) and pure parts ([`mod@bench`]). Not published; the workspace's `weft` package uses it as
//! a dev-dependency.

// Unpublished helpers for the workspace's own targets: their handles (streams, modules, buffers) have no useful Debug.
#![allow(missing_debug_implementations)]

pub mod baselines;
pub mod bench;
pub mod blas;
pub mod common;
pub mod gemm_report;
pub mod kernels;
pub mod lamport;
pub mod moe_unfused;
pub mod select;
pub mod spin;
pub mod test_kernels;
