// Rust methods that share a name with a vocabulary method of another type: `[T]::contains` and `[T]::get` exist in
// Rust (`contains` is `Team`'s in the vocabulary, `get` is `GinSession`'s), so rustc accepts this kernel, but
// `weft::Slice` has neither: before methods were resolved by the receiver's type, it failed in nvcc at the first
// launch.

use weft::prelude::*;

#[weft::kernel]
pub fn find(x: &[f32], out: &mut [u32], needle: f32) {
    if x.contains(&needle) {
        out[0] = 1;
    }
    let _first = x.get(0);
    for i in grid_stride(x.len()) {
        out[i] = 2;
    }
}

fn main() {}
