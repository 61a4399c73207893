// Methods of Rust's standard library do not exist on the GPU: the macro rejects them where they are written,
// instead of letting nvcc fail when the kernel is first launched.
use weft::prelude::*;

#[weft::kernel]
fn squares(src: &[f32], out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = src[i].powi(2);
    }
}

fn main() {}
