//! The examples' kernels, shared with `tests/codegen.rs` (every one is compiled there against each NCCL
//! release's headers).

/// Every kernel's name and generated CUDA C++.
pub const ALL: &[(&str, &str)] = &[];
