// Attack: launch an LL all-to-all kernel with a handle built by hand. On the device, the handle's resource-buffer
// handle and slot count become addresses inside NCCL's resource window (`ncclLLA2ASession`), so a made-up one names
// any offset. The launcher takes the host's `LlA2aHandle`, which only the device communicator makes (private fields:
// host/tests/ui/forged_host_ll_a2a_handle.rs).
#![forbid(unsafe_code)]

use std::sync::Arc;

use weft::host::launch::CudaStream;
use weft::prelude::*;

#[weft::kernel]
pub fn exchange(dev: &DevComm<Lsa>, h: LlA2aHandle, out: &mut [f32]) {
    let a2a = dev.ll_a2a(Warp, h, 0, 4);
    a2a.send(0, 0, 1.0f32);
    out[0] = a2a.recv::<f32>(0);
    a2a.end();
}

fn with_device_struct(stream: &Arc<CudaStream>, dev: &weft::host::DevComm<'_, Lsa>, out: &mut DeviceBuffer<f32>) {
    let forged = weft::device::LlA2aHandle { buffer: 7, slots: 1 << 20 };
    let _ = exchange::launch(stream, LaunchConfig::linear(1, 32), dev, forged, out);
}

fn main() {}
