//! The hand-written CUDA C++ the unfused baselines and the DSL benchmark run (`benches/cuda/`), compiled at run time
//! by the same nvcc, flags and cache as weft's kernels.

/// `ncclAllReduce` + this epilogue: bias + residual (examples 03, the fused benchmark).
pub const ALLREDUCE_EPILOGUE: &str = include_str!("../../benches/cuda/allreduce_epilogue.cu");
/// RMSNorm after NCCL's reduce-scatter, before its all-gather (example 04, the fused benchmark).
pub const RMSNORM_EPILOGUE: &str = include_str!("../../benches/cuda/rmsnorm_epilogue.cu");
/// AdamW on the reduce-scattered shard (example 05, the fused benchmark).
pub const ZERO_ADAM_EPILOGUE: &str = include_str!("../../benches/cuda/zero_adam_epilogue.cu");
/// MoE routing counts, pack and unpack around NCCL's all-to-all (example 06, the fused benchmark).
pub const MOE_DISPATCH_EPILOGUE: &str = include_str!("../../benches/cuda/moe_dispatch_epilogue.cu");
/// The quickstart's LSA all-reduce written by hand (the DSL benchmark).
pub const HAND_ALLREDUCE: &str = include_str!("../../benches/cuda/hand_allreduce.cu");
