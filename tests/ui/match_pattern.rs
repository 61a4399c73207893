// `match` on tuple patterns, which the translation does not support.

use weft::prelude::*;

#[weft::kernel]
pub fn classify(out: &mut [u32], n: usize) {
    for i in grid_stride(n) {
        let pair = (i % 2, i % 3);
        out[i] = match pair {
            (0, 0) => 6,
            (0, _) => 2,
            _ => 1,
        };
    }
}

fn main() {}
