// Launching with an element type the kernel is not instantiated for: a trait error at the call, which `cargo check`
// and IDEs report, naming the type; then a generic caller that does not state the bound it needs.

use std::sync::Arc;

use weft::host::launch::CudaStream;
use weft::host::DeviceBuffer;
use weft::prelude::*;

#[weft::kernel(types(f32))]
pub fn scale<T: Float>(x: &mut [T], factor: T) {
    for i in grid_stride(x.len()) {
        x[i] = x[i] * factor;
    }
}

fn concrete(stream: &Arc<CudaStream>, x: &mut DeviceBuffer<half::bf16>) {
    let _ = scale::launch(stream, LaunchConfig::linear(1, 32), x, half::bf16::ONE);
}

fn generic<T: Float + weft::host::Element>(stream: &Arc<CudaStream>, x: &mut DeviceBuffer<T>, factor: T) {
    let _ = scale::launch(stream, LaunchConfig::linear(1, 32), x, factor);
}

fn main() {}
