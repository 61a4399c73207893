//! weft-host: the safe, typestate runtime over NCCL (loaded at run time) and CUDA (through cudarc).

pub mod jit;
pub mod launch;
