// An LL all-to-all handle written by safe code: its buffer handle is an offset into the device communicator's
// resource memory, which NCCL's session indexes unchecked. The handle's fields are private and it has no
// constructor: only the host, which gets it from NCCL, makes one.
#![forbid(unsafe_code)]

use weft::prelude::*;

#[weft::kernel]
pub fn all_to_all(dev: &DevComm<Lsa>, h: LlA2aHandle, out: &mut [f32]) {
    let a2a = dev.ll_a2a(Warp, h, block_idx_x(), 4);
    a2a.send(0, 0, 1.0f32);
    out[0] = a2a.recv::<f32>(0);
    a2a.end();
}

fn forge() -> LlA2aHandle {
    LlA2aHandle { buffer: 0x7fff_0000, slots: 1 << 30 }
}

fn main() {
    let _ = forge();
}
