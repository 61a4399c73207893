//! The examples' kernels, shared with `tests/codegen.rs` (every one is compiled there against each NCCL
//! release's headers) and with the benchmark suite.

pub mod allreduce;
pub mod allreduce_epilogue;
pub mod allreduce_lamport;
pub mod allreduce_multimem;
pub mod gemm_tp;
pub mod gin_ring;
pub mod moe;
pub mod rmsnorm;
pub mod zero_adam;

/// `KitElement`: one trait with every listed kernel's `Instantiated` as a supertrait, and its blanket impl (the list
/// written once).
macro_rules! kit_element {
    ($($($segment:ident)::+),+ $(,)?) => {
        /// The element types every kit kernel but the tensor-parallel GEMM ones (`gemm_tp`: `f16`, `bf16`) is
        /// instantiated for (`f32`, `bf16`): the one bound generic host code needs to launch any of them (the
        /// examples' `Real` has it).
        pub trait KitElement: $($($segment)::+ +)* {}

        impl<T: $($($segment)::+ +)*> KitElement for T {}
    };
}

kit_element!(
    allreduce::lsa_allreduce::Instantiated,
    allreduce_epilogue::allreduce_bias_residual_one_shot::Instantiated,
    allreduce_epilogue::allreduce_bias_residual_two_shot::Instantiated,
    allreduce_lamport::allreduce_bias_residual_lamport::Instantiated,
    allreduce_multimem::allreduce_bias_residual_multimem::Instantiated,
    moe::moe_dispatch::Instantiated,
    moe::moe_toy_expert::Instantiated,
    moe::moe_combine::Instantiated,
    rmsnorm::rmsnorm_residual_tp::Instantiated,
    zero_adam::zero_adam_step::Instantiated,
);

/// Every kernel's name and generated CUDA C++.
pub const ALL: &[(&str, &str)] = &[
    (allreduce::lsa_allreduce::NAME, allreduce::lsa_allreduce::SOURCE),
    (
        allreduce_epilogue::allreduce_bias_residual_one_shot::NAME,
        allreduce_epilogue::allreduce_bias_residual_one_shot::SOURCE,
    ),
    (
        allreduce_epilogue::allreduce_bias_residual_two_shot::NAME,
        allreduce_epilogue::allreduce_bias_residual_two_shot::SOURCE,
    ),
    (
        allreduce_lamport::allreduce_bias_residual_lamport::NAME,
        allreduce_lamport::allreduce_bias_residual_lamport::SOURCE,
    ),
    (
        allreduce_multimem::allreduce_bias_residual_multimem::NAME,
        allreduce_multimem::allreduce_bias_residual_multimem::SOURCE,
    ),
    (gemm_tp::allgather_gemm::NAME, gemm_tp::allgather_gemm::SOURCE),
    (gemm_tp::gemm_reduce_scatter::NAME, gemm_tp::gemm_reduce_scatter::SOURCE),
    (gemm_tp::gemm_tiles_reduce_scatter::NAME, gemm_tp::gemm_tiles_reduce_scatter::SOURCE),
    (gemm_tp::allgather_signal::NAME, gemm_tp::allgather_signal::SOURCE),
    (rmsnorm::rmsnorm_residual_tp::NAME, rmsnorm::rmsnorm_residual_tp::SOURCE),
    (zero_adam::zero_adam_step::NAME, zero_adam::zero_adam_step::SOURCE),
    (moe::moe_route::NAME, moe::moe_route::SOURCE),
    (moe::moe_dispatch::NAME, moe::moe_dispatch::SOURCE),
    (moe::moe_toy_expert::NAME, moe::moe_toy_expert::SOURCE),
    (moe::moe_combine::NAME, moe::moe_combine::SOURCE),
    (gin_ring::gin_ring_allgather::NAME, gin_ring::gin_ring_allgather::SOURCE),
];
