// A device fn calling a plain Rust function, and a kernel calling another kernel.

use weft::prelude::*;

fn double(x: f32) -> f32 {
    x * 2.0
}

#[weft::device_fn]
pub fn quadruple(x: f32) -> f32 {
    double(double(x))
}

#[weft::kernel]
pub fn fill(out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = 1.0;
    }
}

#[weft::kernel]
pub fn fill_twice(out: &mut [f32], n: usize) {
    fill(out, n);
    for i in grid_stride(n) {
        out[i] = quadruple(out[i]);
    }
}

fn main() {}
