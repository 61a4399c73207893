// A closure in a kernel body: the macro asks for a #[weft::device_fn].

use weft::prelude::*;

#[weft::kernel]
pub fn scale(out: &mut [f32], factor: f32, n: usize) {
    let twice = |x: f32| x * 2.0;
    for i in grid_stride(n) {
        out[i] = twice(factor);
    }
}

fn main() {}
