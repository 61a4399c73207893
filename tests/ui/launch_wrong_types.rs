// Wrong argument types to the generated `launch`: a buffer of the wrong element type, then wrong scalars.

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use weft::host::launch::CudaStream;
use weft::prelude::*;

#[weft::kernel]
pub fn scale(dev: &DevComm<Lsa>, out: &mut [f32], factor: f32, n: usize) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    bar.sync(Cta, Order::Relaxed);
    for i in grid_stride(n) {
        out[i] = out[i] * factor;
    }
}

/// Only the types matter: the first call passes `i32`s where the kernel takes `&mut [f32]`, the second an `f64`
/// where it takes an `f32` and a `u32` where it takes a `usize`.
fn demo(
    stream: &Arc<CudaStream>,
    cfg: LaunchConfig,
    dev: &weft::host::DevComm<'_, Lsa>,
    ints: &mut CudaSlice<i32>,
    floats: &mut CudaSlice<f32>,
) {
    let _ = scale::launch(stream, cfg, dev, ints, 2.0f32, 1024);
    let _ = scale::launch(stream, cfg, dev, floats, 2.0f64, 1024u32);
}

fn main() {}
