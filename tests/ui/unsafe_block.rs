// An `unsafe` block in a kernel body: the vocabulary is safe.

use weft::prelude::*;

#[weft::kernel]
pub fn copy(src: &[f32], out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = unsafe { *src.get_unchecked(i) };
    }
}

fn main() {}
