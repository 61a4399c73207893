// A kernel that needs GIN launched with an LSA-only host communicator: `launch` requires `HasGin`.

use std::sync::Arc;

use weft::host::launch::CudaStream;
use weft::prelude::*;

#[weft::kernel]
pub fn ring_put(dev: &DevComm<LsaGin>, src: &Window<f32>, dst: &Window<f32>, n: usize) {
    let gin = dev.gin(0);
    let next = (dev.rank() + 1) % dev.nranks();
    gin.put(dev.world(), next, dst, src, n, SignalInc(0), NoAction, Cta);
    gin.flush(Cta, Order::Release);
}

/// Only the types matter: an LSA-only host communicator cannot launch a kernel that needs GIN.
fn demo(
    stream: &Arc<CudaStream>,
    cfg: LaunchConfig,
    dev: &weft::host::DevComm<'_, Lsa>,
    src: &weft::host::Window<'_, f32>,
    dst: &weft::host::Window<'_, f32>,
) {
    let _ = ring_put::launch(stream, cfg, dev, src, dst, 1024);
}

fn main() {}
