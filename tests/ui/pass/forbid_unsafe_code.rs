// A crate with `#![forbid(unsafe_code)]` defines kernels and calls their checked `launch`: the macro's own
// `unsafe` (around `KernelArgs::launch`, for the source and arguments it generated) is its expansion's, not the
// crate's, and does not trip the lint.
#![forbid(unsafe_code)]
#![deny(warnings)]

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use weft::host::launch::CudaStream;
use weft::prelude::*;

#[weft::kernel(types(f32, bf16))]
pub fn axpy<T: Float>(a: f32, x: &[T], y: &mut [T], n: usize) {
    for i in grid_stride(n) {
        y[i] = T::from_f32(a * x[i].to_f32() + y[i].to_f32());
    }
}

#[weft::kernel]
pub fn write_at(out: &mut [f32], index: usize) {
    out[index] = 1.0;
}

#[allow(dead_code)]
fn launches(stream: &Arc<CudaStream>, x: &CudaSlice<f32>, y: &mut CudaSlice<f32>) -> Result<(), weft::host::Error> {
    let cfg = LaunchConfig::linear(4, 256);
    axpy::launch(stream, cfg, 2.0, x, y, 1024)?;
    write_at::launch(stream, cfg, y, 3)
}

fn main() {}
