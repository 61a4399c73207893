// An `async` block in a kernel body: rejected by the macro.

use weft::prelude::*;

#[weft::kernel]
pub fn copy(src: &[f32], out: &mut [f32], n: usize) {
    let _later = async { src[0] };
    for i in grid_stride(n) {
        out[i] = src[i];
    }
}

fn main() {}
