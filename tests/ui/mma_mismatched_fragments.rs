// Tensor-core fragments carry their operand and element type: a B tile passed as A, or bf16 mixed with f16, does
// not compile (rustc type-checks the kernel body against weft-device), long before nvcc or the GPU.

use weft::prelude::*;

#[weft::kernel]
pub fn operands_swapped(a: &[bf16], b: &[bf16], out: &mut [f32]) {
    let acc = mma(b.mma_load_b(0, 0, 8), a.mma_load_a(0, 0, 16), MmaAcc::zero());
    out.mma_store(acc, 0, 0, 8);
}

#[weft::kernel]
pub fn types_mixed(a: &[bf16], b: &[f16], out: &mut [f32]) {
    let acc = mma(a.mma_load_a(0, 0, 16), b.mma_load_b(0, 0, 8), MmaAcc::zero());
    out.mma_store(acc, 0, 0, 8);
}

fn main() {}
