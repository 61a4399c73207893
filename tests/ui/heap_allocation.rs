// `Vec` in a kernel body: kernels cannot allocate.

use weft::prelude::*;

#[weft::kernel]
pub fn gather(src: &[f32], out: &mut [f32], n: usize) {
    let mut scratch = Vec::with_capacity(n);
    for i in 0..n {
        scratch.push(src[i]);
    }
    for i in grid_stride(n) {
        out[i] = scratch[i];
    }
}

fn main() {}
