// A kernel calling itself.

use weft::prelude::*;

#[weft::kernel]
pub fn halve(out: &mut [f32], n: usize) {
    if n > 1 {
        halve(out, n / 2);
    }
    for i in grid_stride(n) {
        out[i] = out[i] * 0.5;
    }
}

fn main() {}
