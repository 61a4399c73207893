// A device fn calling itself.

use weft::prelude::*;

#[weft::device_fn]
pub fn factorial(n: u32) -> u32 {
    if n == 0 {
        1
    } else {
        n * factorial(n - 1)
    }
}

#[weft::kernel]
pub fn factorials(out: &mut [u32], n: usize) {
    for i in grid_stride(n) {
        out[i] = factorial(i as u32);
    }
}

fn main() {}
