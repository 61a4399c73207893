// `types(…)` lists a type the parameter's bounds do not admit: its C++ entry point would not compile (and the whole
// module with it, at the first launch). rustc reports it where the type is listed, under `cargo check` too.

use weft::prelude::*;

#[weft::kernel(types(f32, u32))]
pub fn scale<T: Float>(x: &[T], out: &mut [T], factor: T) {
    for i in grid_stride(x.len()) {
        out[i] = x[i].sqrt() * factor;
    }
}

fn main() {}
