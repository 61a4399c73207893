// A `std::` path in a kernel body.

use weft::prelude::*;

#[weft::kernel]
pub fn circle_area(radius: &[f32], out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = std::f32::consts::PI * radius[i] * radius[i];
    }
}

fn main() {}
