// A `&dyn Trait` kernel parameter.

use weft::prelude::*;

pub trait Scale {
    fn apply(&self, x: f32) -> f32;
}

#[weft::kernel]
pub fn scale(out: &mut [f32], by: &dyn Scale, n: usize) {
    for i in grid_stride(n) {
        out[i] = by.apply(out[i]);
    }
}

fn main() {}
