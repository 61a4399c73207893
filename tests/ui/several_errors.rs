// Several unsupported constructs in one kernel: every one is reported, not just the first.

use weft::prelude::*;

#[weft::kernel]
pub fn scale(out: &mut [f32], factor: f32, n: usize) {
    let _twice = |x: f32| x * 2.0;
    let _label = "scale";
    if n > out.len() {
        panic!("n exceeds out");
    }
    let _scratch: Vec<f32> = Vec::new();
    for i in grid_stride(n) {
        out[i] = unsafe { *out.get_unchecked(i) } * factor;
    }
}

fn main() {}
