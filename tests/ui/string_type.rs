// A `String` local and `.to_string()` in a kernel body.

use weft::prelude::*;

#[weft::kernel]
pub fn fill(out: &mut [u32], n: usize) {
    let label: String;
    label = n.to_string();
    for i in grid_stride(n) {
        out[i] = label.len() as u32;
    }
}

fn main() {}
