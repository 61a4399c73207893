// Attack: hand one kernel the same memory as an input and as an output, through two overlapping views of one
// cudarc allocation (cudarc's safe slicing). cudarc's views borrow their slice like Rust slices do, so a shared
// view and a mutable one of the same allocation cannot coexist (disjoint ones come from `split_at_mut`).
#![forbid(unsafe_code)]

use std::sync::Arc;

use weft::host::cudarc::driver::CudaSlice;
use weft::host::launch::CudaStream;
use weft::prelude::*;

#[weft::kernel]
pub fn shift(x: &[f32], out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = x[i + 1];
    }
}

fn demo(stream: &Arc<CudaStream>, x: &mut CudaSlice<f32>) {
    let input = x.slice(0..10);
    let mut output = x.slice_mut(5..15);
    let _ = shift::launch(stream, LaunchConfig::linear(1, 32), &input, &mut output, 9);
}

fn main() {}
