// Two device fns calling each other: rustc reports the cycle through their companion modules.

use weft::prelude::*;

#[weft::device_fn]
pub fn is_even(n: u32) -> bool {
    if n == 0 {
        true
    } else {
        is_odd(n - 1)
    }
}

#[weft::device_fn]
pub fn is_odd(n: u32) -> bool {
    if n == 0 {
        false
    } else {
        is_even(n - 1)
    }
}

#[weft::kernel]
pub fn parity(out: &mut [u32], n: usize) {
    for i in grid_stride(n) {
        out[i] = if is_even(i as u32) { 0 } else { 1 };
    }
}

fn main() {}
