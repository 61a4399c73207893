// A host `static` with a lower-case name: still not a parameter or local.

use weft::prelude::*;

#[allow(non_upper_case_globals)]
static scale_factor: f32 = 2.0;

#[weft::kernel]
pub fn scale(out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = out[i] * scale_factor;
    }
}

fn main() {}
