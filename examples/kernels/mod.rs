//! The examples' kernels, shared with `tests/codegen.rs` (every one is compiled there against each NCCL
//! release's headers).

#![allow(dead_code)] // each example uses some of these kernels, the codegen test all of them

pub mod allreduce;

/// Every kernel's name and generated CUDA C++.
pub const ALL: &[(&str, &str)] = &[(allreduce::lsa_allreduce::NAME, allreduce::lsa_allreduce::SOURCE)];
