// Writing through a `&[T]` parameter: rustc rejects it (take `&mut [T]`).

use weft::prelude::*;

#[weft::kernel]
pub fn scale_in_place(x: &[f32], factor: f32, n: usize) {
    for i in grid_stride(n) {
        x[i] = x[i] * factor;
    }
}

fn main() {}
