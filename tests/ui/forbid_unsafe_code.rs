// In a crate with `#![forbid(unsafe_code)]`, none of the ways around a kernel's bounds compiles: the raw argument
// builder's launch, a raw launch of a hand-packed `ArgBuffer`, and a kernel's `launch_unchecked` each need an
// `unsafe` block, which the crate forbids. (The generated `launch` itself compiles here: tests/ui/pass.)
#![forbid(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice};
use weft::host::jit::{BoundsChecks, KernelSpec};
use weft::host::launch::{launch_raw, ArgBuffer, CudaStream, KernelArgs};
use weft::prelude::*;

#[weft::kernel]
pub fn write_at(out: &mut [f32], index: usize) {
    out[index] = 1.0;
}

fn raw_kernel_args(stream: &Arc<CudaStream>, spec: &KernelSpec) {
    let mut args = KernelArgs::new("evil", stream);
    args.push_scalar("p", 0xdead_0000u64);
    let _ = unsafe { args.launch(spec, LaunchConfig::linear(1, 1), BoundsChecks::Off) };
}

fn raw_launch(stream: &Arc<CudaStream>, function: &CudaFunction) {
    let mut args = ArgBuffer::new();
    args.push(0xdead_0000u64);
    let _ = unsafe { launch_raw(function, stream, &LaunchConfig::linear(1, 1), &mut args) };
}

fn unchecked(stream: &Arc<CudaStream>, out: &mut CudaSlice<f32>) {
    let _ = unsafe { write_at::launch_unchecked(stream, LaunchConfig::linear(1, 1), out, 1 << 40) };
}

fn main() {}
