// A host `static` read in a kernel body: the macro cannot see its value.

use weft::prelude::*;

static SCALE: f32 = 2.0;

#[weft::kernel]
pub fn scale(out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = out[i] * SCALE;
    }
}

fn main() {}
