//! The cases: each fused kernel of `kit/src/kernels/` against its unfused baseline (the NCCL collective(s),
//! then the epilogue as a separate hand-written CUDA C++ kernel from `benches/cuda/*_epilogue.cu`, compiled by
//! the same nvcc).

use crate::harness::Case;
use allreduce_bias_residual::Algorithm;

mod allreduce;
mod allreduce_bias_residual;
mod moe;
mod rmsnorm;
mod zero_adam;

/// Every case that can be measured, in table order.
pub fn all() -> Vec<&'static dyn Case> {
    vec![
        &allreduce::AllReduce,
        &allreduce_bias_residual::AllReduceBiasResidual { algorithm: Algorithm::OneShot },
        &allreduce_bias_residual::AllReduceBiasResidual { algorithm: Algorithm::TwoShot },
        &allreduce_bias_residual::AllReduceBiasResidual { algorithm: Algorithm::Lamport },
        &rmsnorm::RmsNorm,
        &zero_adam::ZeroAdam,
        &moe::Moe,
    ]
}

/// A fused kernel the benchmark should measure but cannot yet.
#[derive(Debug)]
pub struct Pending {
    /// The case name it will have.
    pub name: &'static str,
    /// What it measures.
    pub what: &'static str,
    /// What has to land first.
    pub waiting_for: &'static str,
}

/// The fused kernels of issue 4 that are not measured yet, printed after every run so that the table is never
/// mistaken for the whole suite. When a kernel and its baseline epilogue land: add `cases/<name>.rs` (an
/// `Instance` like `allreduce.rs`'s), list it in [`all`], and remove it here.
pub const PENDING: &[Pending] = &[];
