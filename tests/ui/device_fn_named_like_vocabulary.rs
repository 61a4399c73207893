// A device fn that shadows a vocabulary function: rustc resolves `min(a, b)` in the kernel to this function and
// type-checks it, but a kernel's C++ calls the vocabulary's `weft::min`, so this body would never run. Refused at
// its name.
#![forbid(unsafe_code)]

use weft::prelude::*;

#[weft::device_fn]
pub fn min(a: u32, b: u32) -> u32 {
    a + b
}

#[weft::kernel]
pub fn sums(out: &mut [u32], n: usize) {
    for i in grid_stride(n) {
        out[i] = min(out[i], 1);
    }
}

fn main() {}
