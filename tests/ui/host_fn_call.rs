// A kernel calling a plain Rust function (not a #[weft::device_fn]).

use weft::prelude::*;

fn double(x: f32) -> f32 {
    x * 2.0
}

#[weft::kernel]
pub fn scale(out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = double(out[i]);
    }
}

fn main() {}
