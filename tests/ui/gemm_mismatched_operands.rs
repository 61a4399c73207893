// The block GEMM's operands carry their element type: mixing bf16 with f16, or multiplying f32 matrices (which
// mma.sync does not take), does not compile (rustc type-checks the kernel body against weft-device).

use weft::prelude::*;

#[weft::kernel]
pub fn types_mixed(a: &[bf16], b: &[f16], out: &mut [f32]) {
    let tile = a.gemm_block(0, 32, b, 0, 128, 32);
    out[0] = tile.value(0);
}

#[weft::kernel]
pub fn f32_operands(a: &[f32], b: &[f32], out: &mut [f32]) {
    let tile = a.gemm_block(0, 32, b, 0, 128, 32);
    out[0] = tile.value(0);
}

fn main() {}
