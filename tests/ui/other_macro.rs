// A user macro in a kernel body: only written-out code is translated.

use weft::prelude::*;

macro_rules! square {
    ($x:expr) => {
        $x * $x
    };
}

#[weft::kernel]
pub fn squares(out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = square!(i as f32);
    }
}

fn main() {}
