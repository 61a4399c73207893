// `panic!` in a kernel body: no panicking on the GPU.

use weft::prelude::*;

#[weft::kernel]
pub fn copy(src: &[f32], out: &mut [f32], n: usize) {
    if n > out.len() {
        panic!("n exceeds out");
    }
    for i in grid_stride(n) {
        out[i] = src[i];
    }
}

fn main() {}
