// `Box` in a kernel body: kernels cannot allocate.

use weft::prelude::*;

#[weft::kernel]
pub fn scale(out: &mut [f32], factor: f32, n: usize) {
    let boxed = Box::new(factor);
    for i in grid_stride(n) {
        out[i] = out[i] * boxed.to_f32();
    }
}

fn main() {}
