//! The spin kernel (`spin.cu`): keeps the GPU busy while the host enqueues timed work, so that the CUDA events
//! around each run time the GPU's work, not the host's launch latency. Shared by the fused and the DSL benchmarks.

use cudarc::driver::{CudaFunction, CudaStream};
use weft::host::jit::KernelSpec;
use weft::host::launch::{launch_raw, ArgBuffer};
use weft::host::{Error, LaunchConfig};

/// The spin kernel's CUDA C++.
pub const SPIN_SOURCE: &str = include_str!("spin.cu");
/// The spin kernel, for `jit::function`.
pub const SPIN: KernelSpec =
    KernelSpec { name: "weft_bench_spin", source: SPIN_SOURCE, entry_point: "weft_bench_spin" };

/// Enqueues `function` (the loaded [`SPIN`]) on `stream` for `ns` nanoseconds of the GPU's global timer.
pub fn spin(function: &CudaFunction, stream: &CudaStream, ns: u64) -> Result<(), Error> {
    let mut args = ArgBuffer::new();
    args.push(ns);
    // SAFETY: weft_bench_spin takes one `unsigned long long`, pushed above; it touches no memory.
    unsafe { launch_raw(function, stream, &LaunchConfig::linear(1, 1), &mut args) }
}
